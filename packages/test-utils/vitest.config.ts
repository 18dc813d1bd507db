import { packageTests } from '../../config/vitest.js';

export default packageTests();
