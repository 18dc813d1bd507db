// `forge-audit vkey` and `forge-audit verify-proof`: a proof checked offline with nothing but the
// public key, as a person outside forge would check a receipt (SPEC.md section 9.3).
import { execFile } from 'node:child_process';
import { createPrivateKey } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { scaled } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { generateSigningKeys } from '../src/checkpoint.js';
import { consistencyProof, inclusionProof, MemoryTree, treeHead } from '../src/merkle.js';
import { formatTreeCheckpoint, noteVerifierKey, signNote } from '../src/note.js';
import { CLI, tempDir } from './helpers.js';

const execFileP = promisify(execFile);

async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await execFileP(process.execPath, [CLI, ...args], { env: { ...process.env, CI: 'true' }, timeout: scaled(60_000) });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

describe('forge-audit verify-proof', () => {
  it('proves an entry and a prefix with the public key alone, and says why when it cannot', async () => {
    const dir = await tempDir();
    const keys = generateSigningKeys();
    writeFileSync(join(dir, 'op.pub'), keys.publicKey);
    const key = createPrivateKey(keys.privateKey);
    const vkey = (await cli('vkey', join(dir, 'op.pub'), '--name', 'forge.example/operator')).stdout.trim();
    expect(vkey).toBe(noteVerifierKey('forge.example/operator', key));

    const lines = Array.from({ length: 40 }, (_, i) => `{"seq":${i + 1},"type":"t"}`);
    const tree = new MemoryTree();
    for (const l of lines) tree.append(Buffer.from(l));
    const note = (n: number) =>
      signNote(formatTreeCheckpoint({ origin: 'forge.example/audit', size: n, root: treeHead(tree, n) }), [
        { name: 'forge.example/operator', privateKey: key },
      ]);
    writeFileSync(join(dir, 'cp40'), note(40));
    writeFileSync(join(dir, 'cp25'), note(25));
    const hex = (xs: Uint8Array[]) => xs.map((x) => Buffer.from(x).toString('hex'));
    const write = (name: string, doc: unknown) => {
      writeFileSync(join(dir, name), JSON.stringify(doc));
      return join(dir, name);
    };
    const inc = write('inc.json', { inclusion: { index: 12, line: lines[12], proof: hex(inclusionProof(tree, 12, 40)) } });
    const ok = await cli('verify-proof', join(dir, 'cp40'), inc, '--vkey', vkey);
    expect(ok.stdout.trim()).toBe('proven: entry 13 (index 12) is in forge.example/audit at size 40');
    expect(ok.code).toBe(0);
    // The same with the PEM and the key's name, and as JSON.
    const viaPem = await cli(
      'verify-proof',
      join(dir, 'cp40'),
      inc,
      '--key-pub',
      join(dir, 'op.pub'),
      '--name',
      'forge.example/operator',
      '--json',
    );
    expect(JSON.parse(viaPem.stdout)).toMatchObject({ ok: true, size: 40 });

    const con = write('con.json', { consistency: { checkpoint: note(25), proof: hex(consistencyProof(tree, 25, 40)) } });
    expect((await cli('verify-proof', join(dir, 'cp40'), con, '--vkey', vkey)).stdout.trim()).toBe(
      'proven: forge.example/audit at size 25 is a prefix of it at size 40',
    );

    const wrong = write('wrong.json', { inclusion: { index: 12, line: lines[13], proof: hex(inclusionProof(tree, 12, 40)) } });
    const no = await cli('verify-proof', join(dir, 'cp40'), wrong, '--vkey', vkey);
    expect(no.code).toBe(1);
    expect(no.stdout).toMatch(/^NOT proven: the proof does not place that entry at index 12/);
    const other = noteVerifierKey('forge.example/operator', createPrivateKey(generateSigningKeys().privateKey));
    const unsigned = await cli('verify-proof', join(dir, 'cp40'), inc, '--vkey', other);
    expect(unsigned.code).toBe(1);
    expect(unsigned.stdout).toMatch(/NOT proven: the checkpoint: no signature by a known key/);
    const usage = await cli('verify-proof', join(dir, 'cp40'), inc);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/--vkey <key>, or --key-pub <file> with --name/);
  });
});
