import { packageTests } from '../../config/vitest.js';

// Every test spawns the built CLI, often several times: generous limits for a loaded CI machine.
export default packageTests({ testTimeout: 120_000 });
