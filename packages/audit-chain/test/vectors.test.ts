import { execFile } from 'node:child_process';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { generateSigningKeys, openAuditLog, type VerifyResult, verifyLog } from '../src/index.js';
import { tempDir } from './helpers.js';

const run = promisify(execFile);
const PKG = new URL('..', import.meta.url).pathname;
const VECTORS = join(PKG, 'vectors');
const PY_VERIFIER = join(PKG, 'test/interop/verify_log.py');

interface Expect {
  ok: boolean;
  entries: number;
  head: string;
  first_bad?: { seq: number; line: number; reason: string; file: string };
}
interface Manifest {
  key_pub: string;
  cases: Record<string, { note: string; log: string; key_pub: string | null; expect: Expect }>;
}
const manifest = JSON.parse(await readFile(join(VECTORS, 'expected.json'), 'utf8')) as Manifest;

// The verdicts written down by hand, independently of expected.json, so that a change in the
// implementation cannot quietly rewrite what the vectors promise.
const VERDICTS: Record<string, [reason: string, seq: number, line: number]> = {
  empty: ['ok', 0, 0],
  basic: ['ok', 6, 0],
  checkpointed: ['ok', 6, 0],
  signed: ['ok', 6, 0],
  rotated: ['ok', 13, 0],
  'hash-mismatch': ['hash_mismatch', 3, 3],
  'seq-gap': ['seq_gap', 3, 3],
  'broken-link': ['broken_link', 3, 3],
  'bad-json': ['bad_json', 3, 3],
  'torn-tail': ['torn_tail', 7, 7],
  truncated: ['truncated', 5, 5],
  'truncated-mid-line': ['truncated', 5, 5],
  rollback: ['rollback', 5, 5],
  'signature-invalid': ['signature_invalid', 3, 1],
  'no-signed-checkpoint': ['signature_invalid', 0, 0],
  'bad-checkpoint': ['bad_checkpoint', 0, 1],
  'segment-missing': ['segment_missing', 5, 0],
  'newest-segment-missing': ['segment_missing', 5, 1],
  'old-segments-missing': ['segment_missing', 1, 1],
  'sealed-truncated': ['truncated', 4, 4],
};

/** Runs the Python verifier written from SPEC.md alone. */
async function pyVerify(logPath: string, keyPub?: string): Promise<{ code: number; out: Expect }> {
  const args = [PY_VERIFIER, logPath, ...(keyPub ? ['--key-pub', keyPub] : [])];
  try {
    const { stdout } = await run('python3', args);
    return { code: 0, out: JSON.parse(stdout) as Expect };
  } catch (err) {
    const e = err as { code?: number | string; stdout?: string; stderr?: string };
    if (e.code === 'ENOENT') throw new Error('python3 is required for the interop tests: apt-get install -y python3');
    if (e.code !== 1) throw new Error(`python verifier failed (${e.code}): ${e.stderr}`);
    return { code: 1, out: JSON.parse(e.stdout ?? '') as Expect };
  }
}

function core(r: VerifyResult): Expect {
  const { ok, entries, head, first_bad } = r;
  if (!first_bad) return { ok, entries, head };
  const { seq, line, reason, file } = first_bad;
  return { ok, entries, head, first_bad: { seq, line, reason, file } };
}

describe('test vectors', () => {
  it('cover every verdict written down by hand', () => {
    expect(Object.keys(manifest.cases).sort()).toEqual(Object.keys(VERDICTS).sort());
    for (const [name, c] of Object.entries(manifest.cases)) {
      const [reason, seq, line] = VERDICTS[name] as [string, number, number];
      if (reason === 'ok') expect({ name, ok: c.expect.ok, entries: c.expect.entries }).toEqual({ name, ok: true, entries: seq });
      else expect({ name, ...c.expect.first_bad }).toMatchObject({ name, reason, seq, line });
    }
  });

  it.each(Object.keys(VERDICTS))('%s: the TypeScript verifier reaches the expected verdict', async (name) => {
    const c = manifest.cases[name] as Manifest['cases'][string];
    const dir = join(VECTORS, name);
    const r = await verifyLog(join(dir, c.log), c.key_pub ? { publicKey: await readFile(join(dir, c.key_pub), 'utf8') } : {});
    expect(core(r)).toEqual(c.expect);
  });

  it.each(Object.keys(VERDICTS))('%s: the Python verifier (written from SPEC.md alone) agrees', async (name) => {
    const c = manifest.cases[name] as Manifest['cases'][string];
    const dir = join(VECTORS, name);
    const r = await pyVerify(join(dir, c.log), c.key_pub ? join(dir, c.key_pub) : undefined);
    expect(r.code).toBe(c.expect.ok ? 0 : 1);
    expect(r.out).toEqual(c.expect);
  });

  it('are reproduced byte for byte by the generator', async () => {
    const out = await tempDir();
    await run(process.execPath, [join(PKG, 'scripts/make-vectors.mjs'), out]);
    const list = async (root: string): Promise<string[]> => {
      const found: string[] = [];
      for (const e of await readdir(root, { withFileTypes: true, recursive: true })) {
        if (e.isFile()) found.push(relative(root, join(e.parentPath, e.name)));
      }
      return found.sort();
    };
    const files = await list(VECTORS);
    expect(await list(out)).toEqual(files);
    for (const f of files) {
      expect({ f, bytes: (await readFile(join(out, f))).toString('base64') }).toEqual({
        f,
        bytes: (await readFile(join(VECTORS, f))).toString('base64'),
      });
    }
  });
});

describe('interop on a freshly written log', () => {
  it('Python and TypeScript agree on an intact log and on each tampered copy', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const keys = generateSigningKeys();
    await writeFile(join(dir, 'key.pub'), keys.publicKey);
    const log = await openAuditLog(path, { signingKey: keys.privateKey, maxSegmentBytes: 16 * 1024 });
    const words = ['alpha', 'βeta', 'γάμμα', '東京', '🚀 launch', 'quote " and \\ and \n'];
    for (let i = 0; i < 300; i++) {
      await Promise.all([
        log.append('forge.called', {
          i,
          word: words[i % words.length] ?? '',
          nums: [i / 7, -i, 1.5e-7],
          nested: { deep: [{ k: i % 3 === 0 }] },
        }),
        log.append('user.event', i % 5 === 0 ? null : { i }),
      ]);
      if (i % 97 === 0) await log.checkpoint();
    }
    await log.checkpoint();
    await log.close();

    const ts = await verifyLog(path, { publicKey: keys.publicKey });
    expect(ts.ok).toBe(true);
    expect(ts.segments).toBeGreaterThan(3);
    const py = await pyVerify(path, join(dir, 'key.pub'));
    expect(py.out).toEqual(core(ts));

    // Tamper with the active segment in a few ways; both verifiers must give the same verdict.
    const original = await readFile(path);
    const tampers: ((b: Buffer) => Buffer)[] = [
      (b) => {
        const c = Buffer.from(b);
        const at = Math.floor(c.length / 2);
        c[at] = (c[at] as number) ^ 0x20;
        return c;
      },
      (b) => b.subarray(0, b.length - 10),
      (b) => Buffer.concat([b, b.subarray(0, b.indexOf(10) + 1)]),
    ];
    for (const tamper of tampers) {
      await writeFile(path, tamper(original));
      const t = await verifyLog(path, { publicKey: keys.publicKey });
      expect(t.ok).toBe(false);
      expect((await pyVerify(path, join(dir, 'key.pub'))).out).toEqual(core(t));
    }
  });
});
