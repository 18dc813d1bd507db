// forge's signed checkpoints opened by code nobody here wrote, and the other way round: the Go
// checksum database's sumdb/note (Debian's golang-golang-x-mod-dev) opens a tree checkpoint forge
// signed with forge's verifier key, and forge opens a note Go signed (test/interop/notecheck.go).
import { createPrivateKey, createPublicKey } from 'node:crypto';
import { expect, it } from 'vitest';
import { generateSigningKeys } from '../src/checkpoint.js';
import { MemoryTree, treeHead } from '../src/merkle.js';
import { formatTreeCheckpoint, noteKeyId, noteVerifierKey, openNote, parseTreeCheckpoint, signNote } from '../src/note.js';
import { runGo } from './helpers.js';

it('Go’s sumdb/note opens forge’s signed checkpoint, and forge opens a note Go signed', () => {
  const ours = createPrivateKey(generateSigningKeys().privateKey);
  const tree = new MemoryTree();
  for (let i = 0; i < 77; i++) tree.append(Buffer.from(`{"seq":${i + 1}}`));
  const text = formatTreeCheckpoint({ origin: 'forge.example/audit', size: 77, root: treeHead(tree, 77), extensions: ['ext line'] });
  const note = signNote(text, [{ name: 'forge.example/operator', privateKey: ours }]);

  // Go's signer key for a key of ours: PRIVATE+KEY+name+keyid+base64(0x01 ‖ seed).
  const theirs = createPrivateKey(generateSigningKeys().privateKey);
  const seed = Buffer.from(theirs.export({ format: 'jwk' }).d as string, 'base64url');
  const id = noteKeyId('go.example', createPublicKey(theirs)).toString(16).padStart(8, '0');
  const skey = `PRIVATE+KEY+go.example+${id}+${Buffer.concat([Buffer.from([1]), seed]).toString('base64')}`;
  const goText = `go.example/log\n5\n${Buffer.alloc(32, 9).toString('base64')}\n`;

  const r = runGo('notecheck.go', 'note', { vkey: noteVerifierKey('forge.example/operator', ours), note, skey, text: goText });
  expect(r.status, r.stderr).toBe(0);
  const out = JSON.parse(r.stdout) as { opened: string; signed: string };
  expect(out.opened).toBe(text);
  const opened = openNote(out.signed, [noteVerifierKey('go.example', theirs)]);
  expect(opened).toMatchObject({ ok: true, text: goText });
  expect(parseTreeCheckpoint(goText)).toMatchObject({ origin: 'go.example/log', size: 5 });
});
