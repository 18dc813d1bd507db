// Signed notes and tree checkpoints (src/note.ts): round trips, every kind of damage refused with
// its reason, and any text of the allowed alphabet signed and opened again.
import { createPrivateKey, generateKeyPairSync } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { generateSigningKeys } from '../src/checkpoint.js';
import { MemoryTree, treeHead } from '../src/merkle.js';
import { formatTreeCheckpoint, noteVerifierKey, openNote, parseTreeCheckpoint, parseVerifierKey, signNote } from '../src/note.js';

const key = () => createPrivateKey(generateSigningKeys().privateKey);

describe('signed notes', () => {
  it('signs a checkpoint and opens it with the verifier key; another key leaves it unverified', () => {
    const k = key();
    const tree = new MemoryTree();
    for (let i = 0; i < 10; i++) tree.append(Buffer.from(`line ${i}`));
    const text = formatTreeCheckpoint({ origin: 'forge.example/audit/project-a', size: 10, root: treeHead(tree, 10) });
    const note = signNote(text, [{ name: 'forge.example/operator', privateKey: k }]);
    expect(note.startsWith(`${text}\n\u2014 forge.example/operator `)).toBe(true);
    const vkey = noteVerifierKey('forge.example/operator', k);
    expect(vkey).toMatch(/^forge\.example\/operator\+[0-9a-f]{8}\+[A-Za-z0-9+/]+=*$/);
    const opened = openNote(note, [vkey]);
    expect(opened).toMatchObject({ ok: true, text, unknown: [] });
    expect(parseTreeCheckpoint((opened as { text: string }).text)).toEqual({
      origin: 'forge.example/audit/project-a',
      size: 10,
      root: Buffer.from(treeHead(tree, 10)),
    });
    const other = noteVerifierKey('someone-else', key());
    expect(openNote(note, [other])).toMatchObject({ ok: false, reason: 'unverified' });
    // A second signer (a witness) is kept; the operator's key alone still opens it.
    const w = key();
    const cosigned = signNote(text, [
      { name: 'forge.example/operator', privateKey: k },
      { name: 'witness.example', privateKey: w },
    ]);
    expect(openNote(cosigned, [vkey])).toMatchObject({ ok: true, unknown: [{ name: 'witness.example' }] });
    expect(openNote(cosigned, [vkey, noteVerifierKey('witness.example', w)])).toMatchObject({ ok: true, unknown: [] });
  });

  it('refuses a changed text, a changed signature, and what is not a note, saying which', () => {
    const k = key();
    const vkey = noteVerifierKey('op', k);
    const text = formatTreeCheckpoint({ origin: 'o', size: 3, root: Buffer.alloc(32, 7) });
    const note = signNote(text, [{ name: 'op', privateKey: k }]);
    expect(openNote(note.replace('\n3\n', '\n4\n'), [vkey])).toMatchObject({ ok: false, reason: 'bad_signature' });
    const sigLine = note.split('\n').at(-2) as string;
    const b64 = sigLine.split(' ').at(-1) as string;
    const raw = Buffer.from(b64, 'base64');
    raw[10] = (raw[10] as number) ^ 1;
    expect(openNote(note.replace(b64, raw.toString('base64')), [vkey])).toMatchObject({ ok: false, reason: 'bad_signature' });
    expect(openNote(text, [vkey])).toMatchObject({ ok: false, reason: 'malformed' });
    expect(openNote(note.slice(0, -1), [vkey])).toMatchObject({ ok: false, reason: 'malformed' });
    expect(openNote(note.replace('\u2014', '-'), [vkey])).toMatchObject({ ok: false, reason: 'malformed' });
    expect(openNote(`o\x1b\n${note.slice(2)}`, [vkey])).toMatchObject({ ok: false, reason: 'malformed' });
    expect(openNote(Buffer.concat([Buffer.from(note), Buffer.from([0xff])]), [vkey])).toMatchObject({ ok: false, reason: 'malformed' });
    expect(() => signNote('no newline', [{ name: 'op', privateKey: k }])).toThrow(/line feed/);
    expect(() => signNote('a\n\nb\n', [{ name: 'op', privateKey: k }])).toThrow(/blank line/);
    expect(() => signNote('a\n', [{ name: 'has space', privateKey: k }])).toThrow(/key name/);
    expect(parseVerifierKey('op+00000000+AAAA')).toMatch(/Ed25519/);
    // The base64 key may itself hold "+": only the first two separate the fields.
    const [name, id] = vkey.split('+');
    expect(parseVerifierKey(vkey.replace(`${name}+${id}+`, `${name}+00000000+`))).toMatch(/key ID/);
    expect(parseTreeCheckpoint('o\n-1\nAAAA\n')).toMatch(/not a tree size/);
    expect(parseTreeCheckpoint(`o\n1\n${Buffer.alloc(31).toString('base64')}\n`)).toMatch(/not a base64 tree head/);
  });

  it('any text of allowed lines signs and opens to itself', () => {
    const { privateKey } = generateKeyPairSync('ed25519');
    const vkey = noteVerifierKey('k', privateKey);
    // Any line without a control character (every code point below U+0020).
    const line = fc
      .string({ unit: 'grapheme', minLength: 1, maxLength: 40 })
      .filter((s) => [...s].every((c) => (c.codePointAt(0) as number) >= 0x20));
    fc.assert(
      fc.property(fc.array(line, { minLength: 1, maxLength: 6 }), (lines) => {
        const text = `${lines.join('\n')}\n`;
        const opened = openNote(signNote(text, [{ name: 'k', privateKey }]), [vkey]);
        return opened.ok && opened.text === text;
      }),
      { numRuns: 200 },
    );
  });
});
