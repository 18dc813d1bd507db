#!/usr/bin/env node
// A checkpoint's round trip through a witness on loopback (src/witness.ts, witness-client.ts):
// the log grows by a batch, signs its tree checkpoint, proves consistency from what the witness
// holds, and gets the cosignature back (the witness checks the signature and the proof, records
// the new size durably under its lock, cosigns). Baseline, paired in the same run: an HTTP POST of
// the same body to a server on loopback that answers at once. Needs `pnpm build` first.
//
//   node packages/audit-chain/bench/witness.mjs     (BENCH_RUNS=200 for more samples)

import { createPrivateKey, generateKeyPairSync } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { paired } from '../../../bench/baseline.mjs';
import {
  addCheckpointBody,
  formatTreeCheckpoint,
  generateSigningKeys,
  MemoryTree,
  noteVerifierKey,
  openWitness,
  requestCosignatures,
  signNote,
  treeHead,
  witnessHttpHandler,
} from '../dist/index.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 100);
const BATCH = 4096; // forge checkpoints after at most this many appends
const ORIGIN = 'bench.example/audit';

const dir = await mkdtemp(join(tmpdir(), 'forge-witness-bench-'));
const servers = [];
try {
  const key = createPrivateKey(generateSigningKeys().privateKey);
  const vkey = noteVerifierKey('forge-operator', key);
  const witness = await openWitness({
    name: 'w.bench/w',
    privateKey: generateKeyPairSync('ed25519').privateKey,
    logs: [{ origin: ORIGIN, vkeys: [vkey] }],
    dir: join(dir, 'witness'),
  });
  const serve = (handler) =>
    new Promise((resolve) => {
      const s = createServer(async (req, res) => {
        let body = '';
        for await (const c of req) body += c;
        const a = await handler(body);
        res.writeHead(a.status, { 'content-type': a.contentType }).end(a.body);
      });
      servers.push(s);
      s.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${s.address().port}`));
    });
  const listen = (handler) =>
    new Promise((resolve) => {
      const s = createServer(handler);
      servers.push(s);
      s.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${s.address().port}`));
    });
  const witnessUrl = await listen(witnessHttpHandler(witness));
  const echoUrl = await serve(async () => ({ status: 200, contentType: 'text/plain', body: 'ok\n' }));

  const tree = new MemoryTree();
  let held = 0;
  const grow = () => {
    for (let i = 0; i < BATCH; i++) tree.append(Buffer.from(`{"seq":${tree.size + 1},"type":"forge.called"}`));
  };
  const note = () =>
    signNote(formatTreeCheckpoint({ origin: ORIGIN, size: tree.size, root: treeHead(tree, tree.size) }), [
      { name: 'forge-operator', privateKey: key },
    ]);
  const r = await paired(
    async () => {
      const res = await requestCosignatures({
        note: note(),
        hashes: tree,
        witnesses: [{ url: witnessUrl, vkey: witness.vkey }],
        quorum: 1,
        held: new Map([[witness.vkey, held]]),
      });
      if (!res.witnessed) throw new Error(`not witnessed: ${JSON.stringify(res.refused)}`);
      held = tree.size;
    },
    async () => {
      const res = await fetch(`${echoUrl}/add-checkpoint`, { method: 'POST', body: addCheckpointBody(held, [], note()) });
      await res.text();
    },
    RUNS,
    { before: grow },
  );
  console.log(`checkpoint + witness round trip on loopback (${RUNS} checkpoints, ${BATCH} entries apart; the witness syncs its record)`);
  console.log(`  witnessed    p50 ${r.ours.p50.toFixed(2)} ms   p95 ${r.ours.p95.toFixed(2)} ms`);
  console.log(
    `  plain POST   p50 ${r.base.p50.toFixed(2)} ms   p95 ${r.base.p95.toFixed(2)} ms   (${(r.ours.p50 / r.base.p50).toFixed(1)}× the POST alone)`,
  );
} finally {
  for (const s of servers) s.close();
  await rm(dir, { recursive: true, force: true });
}
