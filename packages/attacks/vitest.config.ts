import { packageTests } from '../../config/vitest.js';

// Attacks run real sandboxes, servers and CLIs, often several at once: generous limits.
export default packageTests({ testTimeout: 120_000 });
