import { packageTests } from '../../config/vitest.js';

// Suites start a throwaway PostgreSQL server and spawn writer processes that they kill -9.
export default packageTests({ testTimeout: 120_000 });
