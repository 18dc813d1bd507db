import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { scaled } from '@forge/test-utils';
import { onTestFinished } from 'vitest';

export { tempDir } from '@forge/test-utils';

/** Absolute path of the built CLI (tests run after `build`). */
export const CLI = new URL('../dist/cli.js', import.meta.url).pathname;
/** Absolute path of the built library entry, for child processes. */
export const DIST = new URL('../dist/index.js', import.meta.url).pathname;

const GOPATH = '/usr/share/gocode';

/**
 * Runs one of test/interop's Go programs (`go run`, Debian's Go and its golang.org/x/mod) on
 * `input` as JSON on stdin. Fails, naming the packages to install, when Go or `sumdb/<pkg>` is
 * missing; Go's work directory is a temporary one removed after the test, its build cache the
 * user's (outside /tmp).
 */
export function runGo(program: string, pkg: 'tlog' | 'note', input: unknown): { status: number | null; stdout: string; stderr: string } {
  const go = spawnSync('go', ['version'], { encoding: 'utf8' });
  const lib = join(GOPATH, 'src/golang.org/x/mod/sumdb', pkg);
  if (go.error || go.status !== 0 || !existsSync(lib))
    throw new Error(
      `this test needs Go and the Go checksum database's ${pkg} package: apt-get install -y golang-go golang-golang-x-mod-dev (${go.error?.message ?? `missing ${lib}`})`,
    );
  const work = mkdtempSync(join(tmpdir(), 'forge-go-'));
  onTestFinished(() => rmSync(work, { recursive: true, force: true }));
  const env: NodeJS.ProcessEnv = { ...process.env, GO111MODULE: 'off', GOPATH, GOFLAGS: '', TMPDIR: work };
  if (!env.HOME && !env.GOCACHE) env.GOCACHE = join(work, 'cache');
  const r = spawnSync('go', ['run', new URL(`interop/${program}`, import.meta.url).pathname], {
    input: JSON.stringify(input),
    encoding: 'utf8',
    env,
    timeout: scaled(240_000),
    maxBuffer: 16 << 20,
  });
  if (r.error) throw new Error(`go run ${program}: ${r.error.message}; stderr: ${r.stderr}`);
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}
