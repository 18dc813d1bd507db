import { packageBuild } from '../../config/tsup.js';

// The CLI and the verify worker are entries of their own; declarations only for the library and
// `./json-scan` (the JSON validity scan alone, no Node API: the operator console's page verifier
// bundles it, so the page and `forge-audit verify` agree on what is one JSON value).
export default packageBuild({
  entry: ['src/index.ts', 'src/cli.ts', 'src/verify-worker.ts', 'src/json-scan.ts'],
  dts: { entry: ['src/index.ts', 'src/json-scan.ts'] },
  splitting: true,
});
