import { packageBuild } from '../../config/tsup.js';

// An executable: no declarations, a shebang. The demo forges the repository's example tools;
// their sources are bundled in as text.
export default packageBuild({
  entry: ['src/cli.ts'],
  dts: false,
  banner: { js: '#!/usr/bin/env node' },
  loader: { '.py': 'text' },
});
