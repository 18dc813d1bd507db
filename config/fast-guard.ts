import { createRequire, syncBuiltinESMExports } from 'node:module';

/**
 * vitest setup file of the fast tier: a test there may start no child process (so no bwrap, no
 * PostgreSQL server, no CLI), and this makes that a checked rule rather than a promise. Every way
 * node:child_process starts one throws, naming the fix, before the test file is imported; ESM
 * importers see the replacements through syncBuiltinESMExports.
 */
const childProcess = createRequire(import.meta.url)('node:child_process') as Record<string, unknown>;
for (const name of ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork']) {
  childProcess[name] = () => {
    throw new Error(
      `child_process.${name} in the fast tier: a test that starts a process (bwrap, PostgreSQL, a CLI) belongs in the full tier; add its file to "slow" in its package's vitest.config.ts`,
    );
  };
}
syncBuiltinESMExports();
