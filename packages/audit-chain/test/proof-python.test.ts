// The second implementation (test/interop/verify_proof.py, written from SPEC.md section 9 and
// RFC 9162 alone) checks forge's signed tree checkpoints, inclusion proofs and consistency
// proofs, and refuses each kind of damage: another leaf, a changed proof node, a checkpoint
// re-signed by another key, an older checkpoint that is not a prefix.
import { spawnSync } from 'node:child_process';
import { createPrivateKey } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { generateSigningKeys } from '../src/checkpoint.js';
import { consistencyProof, inclusionProof, MemoryTree, treeHead } from '../src/merkle.js';
import { formatTreeCheckpoint, noteVerifierKey, signNote } from '../src/note.js';

const SCRIPT = join(dirname(fileURLToPath(import.meta.url)), 'interop', 'verify_proof.py');

function python(request: unknown): { code: number | null; out: { ok: boolean; reason?: string; size?: number } } {
  const r = spawnSync('python3', [SCRIPT], { input: JSON.stringify(request), encoding: 'utf8' });
  if (r.error) throw new Error(`python3 is needed (apt-get install -y python3): ${r.error.message}`);
  return { code: r.status, out: JSON.parse(r.stdout || 'null') ?? { ok: false, reason: r.stderr } };
}

const key = createPrivateKey(generateSigningKeys().privateKey);
const vkey = noteVerifierKey('forge.example/operator', key);
const lines = Array.from({ length: 300 }, (_, i) => `{"seq":${i + 1},"type":"t"}`);
const tree = new MemoryTree();
for (const l of lines) tree.append(Buffer.from(l));
const checkpoint = (n: number, k = key) =>
  signNote(formatTreeCheckpoint({ origin: 'forge.example/audit', size: n, root: treeHead(tree, n) }), [
    { name: 'forge.example/operator', privateKey: k },
  ]);
const hex = (xs: Uint8Array[]) => xs.map((x) => Buffer.from(x).toString('hex'));

describe('verify_proof.py, from the spec alone', () => {
  it('checks inclusion proofs against a signed checkpoint', () => {
    for (const [i, n] of [
      [0, 1],
      [0, 300],
      [137, 300],
      [299, 300],
      [255, 256],
      [100, 257],
    ] as const) {
      const r = python({
        vkey,
        checkpoint: checkpoint(n),
        inclusion: { line: lines[i], index: i, proof: hex(inclusionProof(tree, i, n)) },
      });
      expect(r.out, `leaf ${i} of ${n}`).toEqual({ ok: true, origin: 'forge.example/audit', size: n });
      expect(r.code).toBe(0);
    }
  });

  it('checks consistency proofs between two signed checkpoints', () => {
    for (const [m, n] of [
      [1, 300],
      [7, 8],
      [8, 300],
      [150, 300],
      [256, 257],
      [300, 300],
    ] as const) {
      const r = python({
        vkey,
        checkpoint: checkpoint(n),
        consistency: { checkpoint: checkpoint(m), proof: hex(consistencyProof(tree, m, n)) },
      });
      expect(r.out, `${m} → ${n}`).toMatchObject({ ok: true, size: n });
    }
  });

  it('refuses another leaf, a changed node, another key, and a history that is not a prefix', () => {
    const proof = hex(inclusionProof(tree, 10, 300));
    expect(python({ vkey, checkpoint: checkpoint(300), inclusion: { line: lines[11], index: 10, proof } }).out).toEqual({
      ok: false,
      reason: 'inclusion proof does not check',
    });
    const changed = [...proof];
    changed[3] = `${(changed[3] as string).slice(0, -1)}${(changed[3] as string).endsWith('0') ? '1' : '0'}`;
    expect(python({ vkey, checkpoint: checkpoint(300), inclusion: { line: lines[10], index: 10, proof: changed } }).code).toBe(1);
    const other = createPrivateKey(generateSigningKeys().privateKey);
    expect(python({ vkey, checkpoint: checkpoint(300, other), inclusion: { line: lines[10], index: 10, proof } }).out).toEqual({
      ok: false,
      reason: 'not signed by the key',
    });
    const forged = checkpoint(300).replace(/\n300\n/, '\n299\n');
    expect(python({ vkey, checkpoint: forged, inclusion: { line: lines[10], index: 10, proof } }).out).toEqual({
      ok: false,
      reason: 'signature does not verify',
    });
    // A fork: a 150-entry history that differs from this tree's first 150.
    const fork = new MemoryTree();
    for (let i = 0; i < 150; i++) fork.append(Buffer.from(i === 42 ? '{"forked":true}' : (lines[i] as string)));
    const forkCp = signNote(formatTreeCheckpoint({ origin: 'forge.example/audit', size: 150, root: treeHead(fork, 150) }), [
      { name: 'forge.example/operator', privateKey: key },
    ]);
    expect(
      python({ vkey, checkpoint: checkpoint(300), consistency: { checkpoint: forkCp, proof: hex(consistencyProof(tree, 150, 300)) } }).out,
    ).toEqual({ ok: false, reason: 'consistency proof does not check' });
  });
});
