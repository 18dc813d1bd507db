import { packageBuild } from '../../config/tsup.js';

// The CLI and the verify worker are entries of their own; declarations only for the library.
export default packageBuild({
  entry: ['src/index.ts', 'src/cli.ts', 'src/verify-worker.ts'],
  dts: { entry: 'src/index.ts' },
  splitting: true,
});
