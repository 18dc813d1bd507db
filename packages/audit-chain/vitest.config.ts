import { packageTests } from '../../config/vitest.js';

// Tests spawn real writer processes: longer runs than most packages.
export default packageTests({ testTimeout: 120_000 });
