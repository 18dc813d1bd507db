// Benchmarks for @forge/toolsmith, against the built library (run `pnpm build` first).
// Gap store: records/s through record() with concurrent callers (group commit), against a raw
// baseline measured in the same run (appendFileSync + fdatasync per batch of the same lines), and
// the file's size and line count after 50,000 records with maxRecords 10,000 (it stays bounded).
import { appendFileSync, closeSync, fdatasyncSync, openSync, readFileSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openGapStore } from '../dist/index.js';

const RECORDS = 10_000;
const CALLERS = 100;

function gap(i) {
  return { kind: 'missing_tool', signature: `cap-${i % 500}`, source: 'unknown_tool', at: Date.now(), persona: 'coder', session: 'bench' };
}

async function throughput(dir) {
  const store = openGapStore({ dir, maxRecords: RECORDS });
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < RECORDS; i += CALLERS) {
    const calls = [];
    for (let j = i; j < i + CALLERS; j++) calls.push(store.record(gap(j)));
    await Promise.all(calls);
  }
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  await store.close();
  return RECORDS / s;
}

function baseline(dir) {
  const fd = openSync(join(dir, 'raw.jsonl'), 'a', 0o600);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < RECORDS; i += CALLERS) {
    let text = '';
    for (let j = i; j < i + CALLERS; j++) text += `${JSON.stringify(gap(j))}\n`;
    appendFileSync(fd, text);
    fdatasyncSync(fd);
  }
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  closeSync(fd);
  return RECORDS / s;
}

async function bounded(dir) {
  const store = openGapStore({ dir, maxRecords: 10_000 });
  let maxLines = 0;
  for (let i = 0; i < 50_000; i += CALLERS) {
    const calls = [];
    for (let j = i; j < i + CALLERS; j++) calls.push(store.record(gap(j)));
    await Promise.all(calls);
    if (i % 5_000 === 0) maxLines = Math.max(maxLines, readFileSync(store.file, 'utf8').split('\n').length - 1);
  }
  const lines = readFileSync(store.file, 'utf8').split('\n').length - 1;
  const held = store.records().length;
  await store.close();
  return { bytes: statSync(store.file).size, lines, maxLines: Math.max(maxLines, lines), held };
}

const root = await mkdtemp(join(tmpdir(), 'forge-bench-gaps-'));
try {
  const raw = baseline(root);
  const ours = await throughput(join(root, 'store'));
  console.log(
    `gap store: ${Math.round(ours)} records/s through record() (${RECORDS} records, ${CALLERS} concurrent callers; target >= 10000)`,
  );
  console.log(`baseline:  ${Math.round(raw)} records/s (appendFileSync + fdatasync per batch of ${CALLERS} lines)`);
  console.log(`ratio:     ${(ours / raw).toFixed(2)} of the baseline`);
  const b = await bounded(join(root, 'bounded'));
  console.log(
    `bounded:   after 50000 records (maxRecords 10000): ${b.lines} lines, ${b.bytes} bytes, ${b.held} held; most lines seen ${b.maxLines} (limit 20000)`,
  );
} finally {
  await rm(root, { recursive: true, force: true });
}
