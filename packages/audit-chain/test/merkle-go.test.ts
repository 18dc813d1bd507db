// forge's Merkle tree heads and proofs checked by code nobody here wrote: the Go checksum
// database's tlog package (golang.org/x/mod/sumdb/tlog, Debian's golang-golang-x-mod-dev) builds
// its own tree over the same leaves, must find every head and proof byte-identical to forge's,
// and verifies forge's proofs with CheckRecord and CheckTree (test/interop/tlogcheck.go).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { scaled } from '@forge/test-utils';
import { expect, it, onTestFinished } from 'vitest';
import { consistencyProof, inclusionProof, leafHash, MemoryTree, treeHead } from '../src/merkle.js';

const PROGRAM = join(dirname(fileURLToPath(import.meta.url)), 'interop', 'tlogcheck.go');
const GOPATH = '/usr/share/gocode';
const TLOG = join(GOPATH, 'src/golang.org/x/mod/sumdb/tlog');

it('Go’s sumdb/tlog finds forge’s tree heads and proofs identical to its own, and verifies them', () => {
  const go = spawnSync('go', ['version'], { encoding: 'utf8' });
  if (go.error || go.status !== 0 || !existsSync(TLOG))
    throw new Error(
      `this test needs Go and the Go checksum database's tlog package: apt-get install -y golang-go golang-golang-x-mod-dev (${go.error?.message ?? `missing ${TLOG}`})`,
    );
  const t = new MemoryTree();
  const leaves: string[] = [];
  for (let i = 0; i < 1500; i++) {
    const h = leafHash(Buffer.from(`{"seq":${i},"type":"interop.entry","data":{"i":${i}}}`));
    leaves.push(h.toString('hex'));
    t.appendLeafHash(h);
  }
  const hex = (xs: Uint8Array[]) => xs.map((x) => Buffer.from(x).toString('hex'));
  const sizes = [
    1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1000, 1023, 1024, 1025, 1500,
  ];
  const checks = sizes.map((n) => {
    const indexes = [...new Set([0, 1, n >> 1, n - 2, n - 1, (n * 7) % n, (n * 13 + 5) % n].filter((i) => i >= 0 && i < n))];
    const firsts = [...new Set([1, 2, 3, n >> 1, n - 1, (n * 5 + 3) % n].filter((m) => m >= 1 && m < n))];
    return {
      size: n,
      root: Buffer.from(treeHead(t, n)).toString('hex'),
      inclusion: indexes.map((index) => ({ index, proof: hex(inclusionProof(t, index, n)) })),
      consistency: firsts.map((first) => ({
        first,
        firstRoot: Buffer.from(treeHead(t, first)).toString('hex'),
        proof: hex(consistencyProof(t, first, n)),
      })),
    };
  });
  // Go's build cache goes where the user's is (outside /tmp); its work directory is one of ours.
  const work = mkdtempSync(join(tmpdir(), 'forge-tlog-'));
  onTestFinished(() => rmSync(work, { recursive: true, force: true }));
  const env: NodeJS.ProcessEnv = { ...process.env, GO111MODULE: 'off', GOPATH, GOFLAGS: '', TMPDIR: work };
  if (!env.HOME && !env.GOCACHE) env.GOCACHE = join(work, 'cache');
  const r = spawnSync('go', ['run', PROGRAM], {
    input: JSON.stringify({ leaves, checks }),
    encoding: 'utf8',
    env,
    timeout: scaled(240_000),
  });
  expect(r.error, r.stderr).toBeUndefined();
  expect(r.stderr + r.stdout).toMatch(/^ok: /);
  expect(r.status).toBe(0);
  const proofs = checks.reduce((sum, c) => sum + c.inclusion.length + c.consistency.length, 0);
  expect(r.stdout.trim()).toBe(`ok: ${checks.length} tree heads, ${proofs} proofs`);
});
