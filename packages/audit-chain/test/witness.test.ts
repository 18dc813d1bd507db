// Witnesses (src/witness.ts, src/witness-client.ts; C2SP tlog-witness and tlog-cosignature): a
// witness over real HTTP cosigns a log's checkpoints only while each is consistent with the last
// it cosigned, and refuses rollbacks, forks, unknown logs and foreign signatures with the status
// the specification names; a log reaches its quorum; a cut and re-signed history is refused.
import { spawnSync } from 'node:child_process';
import { createHash, createPrivateKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { generateSigningKeys } from '../src/checkpoint.js';
import { consistencyProof, MemoryTree, treeHead } from '../src/merkle.js';
import { formatTreeCheckpoint, noteVerifierKey, openNote, signNote } from '../src/note.js';
import { addCheckpointBody, openWitness, type Witness, witnessHttpHandler } from '../src/witness.js';
import { checkWitnessed, requestCosignatures } from '../src/witness-client.js';
import { tempDir } from './helpers.js';

const ORIGIN = 'forge.example/audit';

function logKey(): { key: KeyObject; vkey: string } {
  const key = createPrivateKey(generateSigningKeys().privateKey);
  return { key, vkey: noteVerifierKey('forge-operator', key) };
}

function treeOf(n: number, tag = 'a'): MemoryTree {
  const t = new MemoryTree();
  for (let i = 0; i < n; i++) t.append(Buffer.from(`{"seq":${i + 1},"tag":"${tag}"}`));
  return t;
}

function checkpointOf(t: MemoryTree, size: number, key: KeyObject, origin = ORIGIN): string {
  return signNote(formatTreeCheckpoint({ origin, size, root: treeHead(t, size) }), [{ name: 'forge-operator', privateKey: key }]);
}

/** A witness served over HTTP on loopback, as `forge witness` serves it. */
async function servedWitness(name: string, logs: { origin: string; vkeys: string[] }[]): Promise<{ witness: Witness; url: string }> {
  const dir = await tempDir();
  const witness = await openWitness({ name, privateKey: generateKeyPairSync('ed25519').privateKey, logs, dir: join(dir, 'state') });
  const server: Server = createServer(witnessHttpHandler(witness));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
  return { witness, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

async function post(url: string, body: string) {
  const res = await fetch(`${url}/add-checkpoint`, { method: 'POST', body });
  return { status: res.status, type: res.headers.get('content-type'), body: await res.text() };
}

describe('a witness', () => {
  it('cosigns each checkpoint consistent with the last it cosigned, and the log reaches its quorum', async () => {
    const log = logKey();
    const a = await servedWitness('w1.example/w', [{ origin: ORIGIN, vkeys: [log.vkey] }]);
    const b = await servedWitness('w2.example/w', [{ origin: ORIGIN, vkeys: [log.vkey] }]);
    const witnesses = [
      { url: a.url, vkey: a.witness.vkey },
      { url: b.url, vkey: b.witness.vkey },
    ];
    const tree = treeOf(300);
    for (const size of [1, 10, 10, 257, 300]) {
      const r = await requestCosignatures({ note: checkpointOf(tree, size, log.key), hashes: tree, witnesses, quorum: 2 });
      expect(r.refused).toEqual([]);
      expect(r.witnessed).toBe(true);
      const w = checkWitnessed(r.note, [log.vkey], [a.witness.vkey, b.witness.vkey], 2);
      expect(w).toMatchObject({ ok: true, size, origin: ORIGIN, cosigners: ['w1.example/w', 'w2.example/w'] });
      // A cosignature names its time and checks only for the text it was made on.
      const opened = openNote(r.note, [a.witness.vkey]);
      expect(opened.ok && opened.verified[0]?.time).toBeGreaterThan(1_700_000_000);
      expect(openNote(r.note.replace(`\n${size}\n`, `\n${size + 1}\n`), [a.witness.vkey]).ok).toBe(false);
    }
    expect(await a.witness.record(ORIGIN)).toMatchObject({ size: 300 });
    expect(checkWitnessed(checkpointOf(tree, 300, log.key), [log.vkey], [a.witness.vkey], 1)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/fewer than the quorum of 1/),
    });
  });

  it('refuses a rollback, a fork, a cut history signed again, an unknown log, a foreign key and a malformed request', async () => {
    const log = logKey();
    const { witness, url } = await servedWitness('w.example/w', [{ origin: ORIGIN, vkeys: [log.vkey] }]);
    const tree = treeOf(100);
    expect((await post(url, addCheckpointBody(0, [], checkpointOf(tree, 60, log.key)))).status).toBe(200);

    // Rollback: an older size than it holds, from any old size.
    const back = await post(url, addCheckpointBody(0, [], checkpointOf(tree, 40, log.key)));
    expect([back.status, back.type, back.body]).toEqual([409, 'text/x.tlog.size', '60\n']);
    expect((await post(url, addCheckpointBody(60, [], checkpointOf(tree, 40, log.key)))).status).toBe(400);
    // The same size with another head: a fork.
    const fork = treeOf(100, 'b');
    expect((await post(url, addCheckpointBody(60, [], checkpointOf(fork, 60, log.key)))).status).toBe(409);
    // History cut at 50 and grown again, signed with the log's own key: no consistency proof from 60 holds.
    const cut = treeOf(50);
    for (let i = 0; i < 30; i++) cut.append(Buffer.from(`{"rewritten":${i}}`));
    const resigned = await post(url, addCheckpointBody(60, consistencyProof(cut, 60, 80), checkpointOf(cut, 80, log.key)));
    expect(resigned.status).toBe(422);
    expect(resigned.body).toMatch(/does not verify: a fork, or a rewritten history/);
    const viaClient = await requestCosignatures({
      note: checkpointOf(cut, 80, log.key),
      hashes: cut,
      witnesses: [{ url, vkey: witness.vkey }],
      quorum: 1,
    });
    expect(viaClient).toMatchObject({ witnessed: false, refused: [{ reason: expect.stringMatching(/^422/) }] });
    expect(await witness.record(ORIGIN)).toMatchObject({ size: 60 });

    // Unknown origin, another key, bad requests.
    expect((await post(url, addCheckpointBody(0, [], checkpointOf(tree, 60, log.key, 'other.example/log')))).status).toBe(404);
    expect((await post(url, addCheckpointBody(0, [], checkpointOf(tree, 70, logKey().key)))).status).toBe(403);
    for (const body of [
      '',
      'old 01\n\nx',
      `old 60\nnot-base64\n\n${checkpointOf(tree, 70, log.key)}`,
      'old 60\n',
      `old 60\n${'AAAA\n'.repeat(64)}\n`,
    ])
      expect((await post(url, body)).status, JSON.stringify(body.slice(0, 30))).toBe(400);
    expect((await post(url, 'x'.repeat(70 * 1024))).status).toBe(413);
    expect((await fetch(`${url}/add-checkpoint`)).status).toBe(405);
    expect((await fetch(`${url}/other`, { method: 'POST', body: 'x' })).status).toBe(404);
    // A good proof still moves it on.
    const ok = await post(url, addCheckpointBody(60, consistencyProof(tree, 60, 100), checkpointOf(tree, 100, log.key)));
    expect(ok.status).toBe(200);
    expect(ok.body).toMatch(/^\u2014 w\.example\/w [A-Za-z0-9+/=]+\n$/);
  });

  it('checks the old size and records the new one atomically: of two requests from one size, one is cosigned', async () => {
    const log = logKey();
    const { witness, url } = await servedWitness('w.example/w', [{ origin: ORIGIN, vkeys: [log.vkey] }]);
    const tree = treeOf(64);
    expect((await post(url, addCheckpointBody(0, [], checkpointOf(tree, 8, log.key)))).status).toBe(200);
    const answers = await Promise.all(
      [16, 32, 48, 64].map((size) => post(url, addCheckpointBody(8, consistencyProof(tree, 8, size), checkpointOf(tree, size, log.key)))),
    );
    expect(answers.map((x) => x.status).sort()).toEqual([200, 409, 409, 409]);
    const won = [16, 32, 48, 64][answers.findIndex((x) => x.status === 200)];
    expect(await witness.record(ORIGIN)).toMatchObject({ size: won });
  });

  it('a FIFO where its record of a log goes is an error answered at once, never waited on', async () => {
    const log = logKey();
    const dir = await tempDir();
    const state = join(dir, 'state');
    const witness = await openWitness({
      name: 'w.example/w',
      privateKey: generateKeyPairSync('ed25519').privateKey,
      logs: [{ origin: ORIGIN, vkeys: [log.vkey] }],
      dir: state,
    });
    expect(spawnSync('mkfifo', [join(state, `${createHash('sha256').update(ORIGIN).digest('hex')}.json`)]).status).toBe(0);
    await expect(witness.record(ORIGIN)).rejects.toMatchObject({ message: expect.stringMatching(/is not a regular file/) });
    const server: Server = createServer(witnessHttpHandler(witness));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
    const r = await post(
      `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      addCheckpointBody(0, [], checkpointOf(treeOf(4), 4, log.key)),
    );
    expect(r.status).toBeGreaterThanOrEqual(500);
  });
});
