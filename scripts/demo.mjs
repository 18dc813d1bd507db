#!/usr/bin/env node
// `pnpm demo`: runs `forge demo` (apps/forge/dist/cli.js) in a workspace that is already built.
// `bash scripts/demo.sh` installs and builds first; this is the quick way to run it again.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const cli = fileURLToPath(new URL('../apps/forge/dist/cli.js', import.meta.url));
if (!existsSync(cli)) {
  console.error(`forge demo: ${cli} is not built yet; run \`bash scripts/demo.sh\` (or \`pnpm build\` first)`);
  process.exit(2);
}
const r = spawnSync(process.execPath, [cli, 'demo', ...process.argv.slice(2)], { stdio: 'inherit' });
process.exit(r.status ?? 1);
