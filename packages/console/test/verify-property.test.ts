import { createHash } from 'node:crypto';
import { readdir, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { generateSigningKeys, openAuditLog, verifyLog as referenceVerify } from '@forge/audit-chain';
import { tempDir } from '@forge/test-utils';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type Bytes, verifyLog } from '../src/web/verify.js';

/** The page's verifier and `forge audit verify` (the reference) reach the same verdict on any damage. */

const keys = generateSigningKeys();

interface Plan {
  entries: { type: string; data: unknown }[];
  checkpointAt: number[];
  rotateAt: number[];
  signed: boolean;
}

/** I-JSON as the log takes it: safe integers, finite numbers, well-formed strings. */
function ijson(v: unknown): boolean {
  if (typeof v === 'number') return Number.isFinite(v) && (!Number.isInteger(v) || Number.isSafeInteger(v));
  if (typeof v === 'string') return v.isWellFormed();
  if (Array.isArray(v)) return v.every(ijson);
  if (v && typeof v === 'object') return Object.entries(v).every(([k, x]) => k.isWellFormed() && ijson(x));
  return true;
}

const plan: fc.Arbitrary<Plan> = fc.record({
  entries: fc.array(
    fc.record({
      type: fc.constantFrom('forge.called', 'forge.created', 'user.note', 'x:y/z-1'),
      data: fc.oneof(
        fc.constant(null),
        fc.jsonValue({ maxDepth: 2 }).filter((v) => ijson(v) && JSON.stringify(v).length < 300),
      ),
    }),
    { minLength: 0, maxLength: 14 },
  ),
  checkpointAt: fc.uniqueArray(fc.integer({ min: 0, max: 14 }), { maxLength: 3 }),
  rotateAt: fc.uniqueArray(fc.integer({ min: 1, max: 14 }), { maxLength: 2 }),
  signed: fc.boolean(),
});

/** One damage done to one of the log's files. */
type Damage =
  | { kind: 'none' }
  | { kind: 'flip'; file: number; at: number; bit: number }
  | { kind: 'cut'; file: number; at: number }
  | { kind: 'drop_line'; file: number; line: number }
  | { kind: 'remove'; file: number };

const damage: fc.Arbitrary<Damage> = fc.oneof(
  fc.constant({ kind: 'none' as const }),
  fc.record({ kind: fc.constant('flip' as const), file: fc.nat(), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({ kind: fc.constant('cut' as const), file: fc.nat(), at: fc.nat() }),
  fc.record({ kind: fc.constant('drop_line' as const), file: fc.nat(), line: fc.nat() }),
  fc.record({ kind: fc.constant('remove' as const), file: fc.nat() }),
);

async function write(dir: string, p: Plan): Promise<string> {
  const path = join(dir, 'audit.log');
  const log = await openAuditLog(path, { tree: false, ...(p.signed ? { signingKey: keys.privateKey } : {}) });
  try {
    if (p.checkpointAt.includes(0)) await log.checkpoint();
    for (let i = 0; i < p.entries.length; i++) {
      const e = p.entries[i] as Plan['entries'][number];
      await log.append(e.type, e.data as never);
      if (p.checkpointAt.includes(i + 1)) await log.checkpoint();
      if (p.rotateAt.includes(i + 1)) await log.rotate();
    }
  } finally {
    await log.close();
  }
  return path;
}

async function harm(dir: string, d: Damage): Promise<void> {
  if (d.kind === 'none') return;
  const files = (await readdir(dir)).filter((n) => n.startsWith('audit.log') && !n.endsWith('.lock')).sort();
  if (files.length === 0) return;
  const file = join(dir, files[d.file % files.length] as string);
  if (d.kind === 'remove') return rm(file, { force: true });
  const bytes = await readFile(file);
  if (bytes.length === 0) return;
  if (d.kind === 'flip') {
    const at = d.at % bytes.length;
    bytes[at] = (bytes[at] as number) ^ (1 << d.bit);
    return writeFile(file, bytes);
  }
  if (d.kind === 'cut') return truncate(file, d.at % bytes.length);
  const lines = bytes.toString('latin1').split(/(?<=\n)/);
  lines.splice(d.line % lines.length, 1);
  return writeFile(file, Buffer.from(lines.join(''), 'latin1'));
}

const verdict = (r: {
  ok: boolean;
  entries: number;
  head: string;
  first_bad?: { seq: number; line: number; reason: string; file: string };
}) => ({
  ok: r.ok,
  entries: r.entries,
  head: r.head,
  ...(r.first_bad
    ? { first_bad: { seq: r.first_bad.seq, line: r.first_bad.line, reason: r.first_bad.reason, file: r.first_bad.file } }
    : {}),
});

describe('the page verifier against the reference verifier', () => {
  it('property: any log, any one damage (a flipped bit, a cut, a dropped line, a removed file), read whole or streamed in chunks of any size: the same verdict', async () => {
    await fc.assert(
      fc.asyncProperty(plan, damage, fc.boolean(), fc.integer({ min: 0, max: 300 }), async (p, d, withKey, chunk) => {
        const dir = await tempDir('forge-console-verify-');
        await write(dir, p);
        await harm(dir, d);
        const options = withKey ? { publicKey: keys.publicKey } : {};
        const reference = await referenceVerify(join(dir, 'audit.log'), options);
        const names = await readdir(dir);
        const read = async (name: string) => {
          try {
            return new Uint8Array(await readFile(join(dir, name))) as Bytes;
          } catch {
            return undefined;
          }
        };
        // Read whole (chunk 0), or streamed in chunks of any size, as the page reads a fetch's body.
        const stream = async (name: string) => {
          const bytes = await read(name);
          if (bytes === undefined) return undefined;
          return (async function* () {
            for (let at = 0; at < bytes.length; at += chunk) yield bytes.slice(at, at + chunk);
          })();
        };
        const ours = await verifyLog(
          { base: 'audit.log', names, read, ...(chunk > 0 ? { stream } : {}) },
          { ...options, batchBytes: 1 + ((chunk * 97) % 2000) },
        );
        expect(verdict(ours)).toEqual(verdict(reference));
        await rm(dir, { recursive: true, force: true });
      }),
      { numRuns: Number(process.env.FORGE_PROPERTY_RUNS ?? 150) },
    );
  });
});

/**
 * Lines written by someone who can hash: each entry's body spelled almost right (a byte inserted,
 * removed or replaced, from bytes that matter to the grammar: a byte order mark, UTF-8 lead and
 * continuation bytes, whitespace, quotes, escapes, digits, signs), then hashed and linked correctly,
 * so only the shape checks can tell. The page and the reference must agree on each.
 */
const ODD = [
  [0xef, 0xbb, 0xbf],
  [0x80],
  [0xc3],
  [0xc3, 0xa9],
  [0xed, 0xa0, 0x80],
  [0x20],
  [0x09],
  [0x0d],
  [0x00],
  [0x22],
  [0x5c],
  [0x5c, 0x75],
  [0x30],
  [0x39],
  [0x2d],
  [0x2b],
  [0x2e],
  [0x65],
  [0x7b],
  [0x7d],
  [0x5b],
  [0x2c],
  [0x3a],
  [0x41],
  [0x5f],
];
type Edit = { kind: 'insert' | 'replace' | 'remove'; at: number; fromEnd?: boolean; bytes: number };
// Anywhere, and often at the edges (the first bytes, the last before the hash), where the grammar's edges are.
const edit: fc.Arbitrary<Edit | undefined> = fc.option(
  fc.record({
    kind: fc.constantFrom('insert' as const, 'replace' as const, 'remove' as const),
    at: fc.oneof(fc.nat({ max: 2 }), fc.nat()),
    fromEnd: fc.boolean(),
    bytes: fc.nat(),
  }),
  { freq: 2 },
);

function forged(entries: { type: string; data: unknown; edit: Edit | undefined }[]): Buffer {
  let prev = '0'.repeat(64);
  const out: Buffer[] = [];
  entries.forEach((e, i) => {
    let body = Buffer.from(
      `{"seq":${i + 1},"ts":"2026-12-05T07:00:00.000Z","type":${JSON.stringify(e.type)},"data":${JSON.stringify(e.data)},"prev":"${prev}"`,
    );
    if (e.edit) {
      const at = e.edit.fromEnd ? Math.max(0, body.length - (e.edit.at % (body.length + 1))) : e.edit.at % (body.length + 1);
      const odd = Buffer.from(ODD[e.edit.bytes % ODD.length] as number[]);
      const rest = body.subarray(e.edit.kind === 'insert' ? at : Math.min(body.length, at + 1));
      body = Buffer.concat([body.subarray(0, at), e.edit.kind === 'remove' ? Buffer.alloc(0) : odd, rest]);
    }
    const hash = createHash('sha256').update(body).digest('hex');
    out.push(body, Buffer.from(`,"hash":"${hash}"}\n`));
    prev = hash;
  });
  return Buffer.concat(out);
}

describe('the page verifier against the reference verifier, lines forged with right hashes', () => {
  it('property: any almost-right spelling of an entry, hashed and linked: the same verdict', async () => {
    const dir = await tempDir('forge-console-forged-');
    try {
      await fc.assert(
        fc.asyncProperty(
          fc.array(
            fc.record({
              type: fc.constantFrom('forge.called', 'audit.segment', 'x:y/z-1', 'a'.repeat(128)),
              data: fc.oneof(
                fc.constant(null),
                fc.jsonValue({ maxDepth: 2 }).filter((v) => ijson(v) && JSON.stringify(v).length < 200),
              ),
              edit,
            }),
            { minLength: 1, maxLength: 6 },
          ),
          async (entries) => {
            const bytes = forged(entries);
            await writeFile(join(dir, 'audit.log'), bytes);
            const reference = await referenceVerify(join(dir, 'audit.log'));
            const ours = await verifyLog({
              base: 'audit.log',
              names: ['audit.log'],
              read: async (name) => (name === 'audit.log' ? (new Uint8Array(bytes) as Bytes) : undefined),
            });
            expect(verdict(ours)).toEqual(verdict(reference));
          },
        ),
        { numRuns: Number(process.env.FORGE_PROPERTY_RUNS ?? 150) * 4 },
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a line that starts with a byte order mark is bad_json in both, though its hash is right', async () => {
    const dir = await tempDir('forge-console-bom-');
    try {
      const bytes = forged([{ type: 'forge.called', data: { a: 1 }, edit: { kind: 'insert', at: 0, bytes: 0 } }]);
      expect([...bytes.subarray(0, 4)]).toEqual([0xef, 0xbb, 0xbf, 0x7b]);
      await writeFile(join(dir, 'audit.log'), bytes);
      const ours = await verifyLog({
        base: 'audit.log',
        names: ['audit.log'],
        read: async (name) => (name === 'audit.log' ? (new Uint8Array(bytes) as Bytes) : undefined),
      });
      expect(verdict(ours)).toEqual(verdict(await referenceVerify(join(dir, 'audit.log'))));
      expect(ours.first_bad).toEqual({ seq: 1, line: 1, reason: 'bad_json', file: 'audit.log' });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
