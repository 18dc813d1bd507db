// One benchmark writer process. Modes:
//   pg   <url>  <count> <start-file>   appends through openPostgresAuditLog, `WINDOW` in flight
//   file <path> <count> <start-file>   the same through the file log of @forge/audit-chain
// Opens the log, waits until <start-file> exists (so that all writers start together), appends,
// closes, then prints one JSON line {ms, count, batches}.
import { existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { openAuditLog } from '@forge/audit-chain';
// The same ~500-byte record as audit-chain's own bench, so the two figures compare.
import { entryData } from '../../audit-chain/bench/data.mjs';
import { openPostgresAuditLog } from '../dist/index.js';

const [mode, target, countArg, startFile] = process.argv.slice(2);
const count = Number(countArg);
const WINDOW = Number(process.env.BENCH_WINDOW ?? 2000);

let batches = 0;
const log = mode === 'pg' ? await openPostgresAuditLog(target, { onBatch: () => batches++ }) : await openAuditLog(target);
while (!existsSync(startFile)) await sleep(1);
const t0 = performance.now();
let next = 0;
async function lane() {
  while (next < count) {
    next++;
    await log.append('forge.called', entryData(next));
  }
}
await Promise.all(Array.from({ length: Math.min(WINDOW, count) }, lane));
const ms = performance.now() - t0;
await log.close();
console.log(JSON.stringify({ ms, count, batches }));
