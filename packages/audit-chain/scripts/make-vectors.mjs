#!/usr/bin/env node
// Writes the test vectors in ../vectors from the built library: small logs, each with the verdict
// that SPEC.md requires of any verifier. Deterministic (fixed clock, fixed key), so running it
// again reproduces the committed files byte for byte; the test suite checks that it does.
//
//   node scripts/make-vectors.mjs [out-dir]    (default: vectors/)

import { createHash, createPrivateKey, createPublicKey } from 'node:crypto';
import { mkdir, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openAuditLog, verifyLog } from '../dist/index.js';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] ?? join(here, '..', 'vectors');

// A fixed Ed25519 key for the vectors (test material, published on purpose): PKCS #8 DER prefix
// for Ed25519 followed by a 32-byte seed.
const seed = createHash('sha256').update('forge-audit-chain test vector key').digest();
const privateKey = createPrivateKey({
  key: Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), seed]),
  format: 'der',
  type: 'pkcs8',
});
const publicPem = createPublicKey(privateKey).export({ format: 'pem', type: 'spki' }).toString();

function fixedClock() {
  let t = Date.UTC(2026, 10, 30, 12, 0, 0, 0);
  return () => new Date((t += 1000));
}

const SAMPLE = [
  ['forge.created', { name: 'code.csv_filter', runtime: 'python3', version: 1 }],
  ['forge.called', { name: 'code.csv_filter', ok: true, duration_ms: 41, input_digest: `sha256:${'7'.repeat(64)}` }],
  ['user.note', { text: 'naïve café — 東京 🚀', nested: { list: [1, 2.5, -3e-7, null, true, false, ''] } }],
  ['forge.called', { name: 'code.csv_filter', ok: false, error: { kind: 'timeout', message: 'ran past 30000 ms' } }],
  ['policy.reloaded', { changed: ['/breakers/per_tool_rpm'], escaped: 'quote " backslash \\ newline \n tab \t' }],
  ['x:y/z-1_2.3', null],
];

async function writeLog(dir, { entries = SAMPLE.length, checkpointAt = [], signed = false, rotateAt = [] } = {}) {
  await mkdir(dir, { recursive: true });
  const path = join(dir, 'audit.log');
  // The vectors are of the chain (SPEC.md sections 1 to 8): no tree beside them.
  const log = await openAuditLog(path, { clock: fixedClock(), tree: false, ...(signed ? { signingKey: privateKey } : {}) });
  if (checkpointAt.includes(0)) await log.checkpoint();
  for (let i = 0; i < entries; i++) {
    const [type, data] = SAMPLE[i % SAMPLE.length];
    await log.append(type, data);
    if (checkpointAt.includes(i + 1)) await log.checkpoint();
    if (rotateAt.includes(i + 1)) await log.rotate();
  }
  await log.close();
  return path;
}

async function lines(path) {
  const text = await readFile(path);
  const out = [];
  let i = 0;
  while (i < text.length) {
    const nl = text.indexOf(10, i);
    const end = nl < 0 ? text.length : nl + 1;
    out.push(text.subarray(i, end));
    i = end;
  }
  return out;
}

/** Re-hashes a line body as SPEC.md 2.1 says, replacing its prev; returns the line and hash. */
function seal(bodyWithoutPrev, prev) {
  const body = Buffer.from(`${bodyWithoutPrev},"prev":"${prev}"`);
  const hash = createHash('sha256').update(body).digest('hex');
  return { line: Buffer.concat([body, Buffer.from(`,"hash":"${hash}"}\n`)]), hash };
}

function bodyWithoutPrev(line) {
  const s = line.toString('utf8');
  return s.slice(0, s.length - 76 - 74);
}

const cases = {};
async function record(name, path, { keyPub = false, note } = {}) {
  if (keyPub) await writeFile(join(dirname(path), 'key.pub'), publicPem);
  const r = await verifyLog(path, keyPub ? { publicKey: publicPem } : {});
  const expect = { ok: r.ok, entries: r.entries, head: r.head };
  if (r.first_bad) {
    const { seq, line, reason, file } = r.first_bad;
    expect.first_bad = { seq, line, reason, file };
  }
  cases[name] = { note, log: 'audit.log', key_pub: keyPub ? 'key.pub' : null, expect };
}

await rm(out, { recursive: true, force: true });
await mkdir(out, { recursive: true });

// Intact logs.
{
  const dir = join(out, 'empty');
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, '.keep'), '');
  await record('empty', join(dir, 'audit.log'), { note: 'no files at all: an empty log, head = genesis' });
}
await record('basic', await writeLog(join(out, 'basic')), { note: 'six entries, unicode and escapes in data' });
await record('checkpointed', await writeLog(join(out, 'checkpointed'), { checkpointAt: [0, 2, 4] }), {
  note: 'unsigned checkpoints at 2 and 4 entries; 2 entries not yet checkpointed',
});
await record('signed', await writeLog(join(out, 'signed'), { checkpointAt: [3, 6], signed: true }), {
  keyPub: true,
  note: 'checkpoints signed with the vector key; verify with key.pub',
});
await record('rotated', await writeLog(join(out, 'rotated'), { entries: 9, rotateAt: [3, 6], checkpointAt: [5] }), {
  note: 'two rotations: sealed segments 1 and 2, active segment 3, a checkpoint inside segment 2',
});

// Damaged logs: one fault each.
{
  const path = await writeLog(join(out, 'hash-mismatch'));
  const ls = await lines(path);
  const l = Buffer.from(ls[2]);
  l[40] ^= 0x01; // a byte inside entry 3's data
  ls[2] = l;
  await writeFile(path, Buffer.concat(ls));
  await record('hash-mismatch', path, { note: 'one bit of entry 3 flipped' });
}
{
  const path = await writeLog(join(out, 'seq-gap'));
  const ls = await lines(path);
  ls.splice(2, 1);
  await writeFile(path, Buffer.concat(ls));
  await record('seq-gap', path, { note: 'entry 3 deleted' });
}
{
  const path = await writeLog(join(out, 'broken-link'));
  const ls = await lines(path);
  // Entry 3 re-hashed onto a different prev: its own hash is right, its link is not.
  ls[2] = seal(bodyWithoutPrev(ls[2]), 'f'.repeat(64)).line;
  await writeFile(path, Buffer.concat(ls));
  await record('broken-link', path, { note: 'entry 3 re-hashed with a prev that is not entry 2' });
}
{
  const path = await writeLog(join(out, 'bad-json'));
  const ls = await lines(path);
  const prev = ls[1].toString().slice(-76 + 9, -3);
  const body = bodyWithoutPrev(ls[2]).replace(/"data":.*$/, '"data":{"n":NaN}');
  ls[2] = seal(body, prev).line;
  await writeFile(path, Buffer.concat(ls.slice(0, 3)));
  await record('bad-json', path, { note: 'entry 3 has a correct hash over data that is not JSON (NaN)' });
}
{
  const path = await writeLog(join(out, 'torn-tail'));
  const ls = await lines(path);
  await writeFile(path, Buffer.concat([...ls, ls[0].subarray(0, 30)]));
  await record('torn-tail', path, { note: 'an interrupted write: 30 bytes without a line feed after entry 6' });
}
{
  const path = await writeLog(join(out, 'truncated'), { checkpointAt: [6] });
  const ls = await lines(path);
  await writeFile(path, Buffer.concat(ls.slice(0, 4)));
  await record('truncated', path, { note: 'checkpoint at 6 entries, log cut after entry 4' });
}
{
  const path = await writeLog(join(out, 'truncated-mid-line'), { checkpointAt: [6] });
  const ls = await lines(path);
  await truncate(path, Buffer.concat(ls.slice(0, 4)).length + 25);
  await record('truncated-mid-line', path, { note: 'checkpoint at 6 entries, log cut inside entry 5: truncated, not torn' });
}
{
  const path = await writeLog(join(out, 'rollback'), { checkpointAt: [5] });
  const ls = await lines(path);
  // Entry 4 edited and every later entry re-hashed: a self-consistent chain that disagrees with
  // the checkpoint at entry 5.
  let prev = ls[2].toString().slice(-76 + 9, -3);
  for (let i = 3; i < ls.length; i++) {
    const body = i === 3 ? bodyWithoutPrev(ls[i]).replace('timeout', 'success') : bodyWithoutPrev(ls[i]);
    const sealed = seal(body, prev);
    ls[i] = sealed.line;
    prev = sealed.hash;
  }
  await writeFile(path, Buffer.concat(ls));
  await record('rollback', path, { note: 'entry 4 edited, entries 4-6 re-hashed; the checkpoint at 5 disagrees' });
}
{
  const path = await writeLog(join(out, 'signature-invalid'), { checkpointAt: [4], signed: true });
  const cp = join(dirname(path), 'audit.log.checkpoints');
  const text = (await readFile(cp, 'utf8')).replace('"entries":4', '"entries":3');
  await writeFile(cp, text);
  await record('signature-invalid', path, { keyPub: true, note: 'the signed checkpoint was edited (entries 4 → 3)' });
}
{
  const path = await writeLog(join(out, 'no-signed-checkpoint'), { checkpointAt: [4] });
  await record('no-signed-checkpoint', path, { keyPub: true, note: 'only unsigned checkpoints, verified with a key' });
}
{
  const path = await writeLog(join(out, 'bad-checkpoint'), { checkpointAt: [2, 4] });
  const cp = join(dirname(path), 'audit.log.checkpoints');
  const text = (await readFile(cp, 'utf8')).replace('"segment":1,', '"segment":"1",');
  await writeFile(cp, text);
  await record('bad-checkpoint', path, { note: 'a checkpoint line whose segment is a string' });
}
{
  const path = await writeLog(join(out, 'segment-missing'), { entries: 12, rotateAt: [3, 6, 9] });
  await rm(join(dirname(path), 'audit.log.000002'));
  await record('segment-missing', path, { note: 'sealed segment 2 of 3 removed: a gap in the numbers' });
}
{
  const path = await writeLog(join(out, 'newest-segment-missing'), { entries: 9, rotateAt: [3, 6] });
  await rm(join(dirname(path), 'audit.log.000002'));
  await record('newest-segment-missing', path, {
    note: 'the newest sealed segment removed: the active segment (taken as 2) starts with the header of 3',
  });
}
{
  const path = await writeLog(join(out, 'old-segments-missing'), { entries: 9, rotateAt: [3, 6] });
  await rm(join(dirname(path), 'audit.log.000001'));
  await rm(join(dirname(path), 'audit.log.000002'));
  await record('old-segments-missing', path, { note: 'every sealed segment removed: the active one starts with a header' });
}
{
  const path = await writeLog(join(out, 'sealed-truncated'), { entries: 9, rotateAt: [3, 6] });
  const seg = join(dirname(path), 'audit.log.000001');
  const ls = await lines(seg);
  await writeFile(seg, Buffer.concat(ls.slice(0, -1)));
  await record('sealed-truncated', path, { note: 'sealed segment 1 lost its audit.sealed entry' });
}

const manifest = {
  format: 'forge-audit-chain v1 test vectors (see SPEC.md)',
  key_pub: publicPem,
  cases,
};
await writeFile(join(out, 'expected.json'), `${JSON.stringify(manifest, null, 2)}\n`);
console.log(`wrote ${Object.keys(cases).length} vectors to ${out}`);
