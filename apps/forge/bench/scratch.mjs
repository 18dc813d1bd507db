// A scratch forge home and project for a bench of the built CLI (removed when the process exits),
// with fib forged as `fib_run`, not deterministic, so every call runs (no cache). Shared by the
// benches in this directory that call a tool through the CLI or `forge serve`.

import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { loadExample } from '../../../examples/index.mjs';

const run = promisify(execFile);

/** The scratch directories, the CLI's environment there (no FORGE_* of the host), and fib's impl. */
export async function fibScratch(cli, prefix) {
  const root = mkdtempSync(join(tmpdir(), prefix));
  process.on('exit', () => rmSync(root, { recursive: true, force: true }));
  const home = join(root, 'home');
  const project = join(root, 'project');
  mkdirSync(home, { recursive: true, mode: 0o700 });
  mkdirSync(join(project, '.forge'), { recursive: true });
  // Breakers high enough not to stop a benchmark; everything else is the bundle defaults.
  writeFileSync(join(home, 'policy.json'), JSON.stringify({ breakers: { per_tool_rpm: 1e9, per_session_forge_count: 1e9 } }));
  const env = {
    ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('FORGE_'))),
    FORGE_HOME: home,
    NO_COLOR: '1',
  };
  const fib = loadExample('fib');
  const spec = join(root, 'fib.json');
  writeFileSync(spec, JSON.stringify({ ...fib, name: 'fib_run', meta: { ...fib.meta, deterministic: false } }));
  await run(process.execPath, [cli, 'tools', 'forge', spec], { cwd: project, env });
  return { root, home, project, env, impl: fib.impl };
}
