// One benchmark writer process. Modes:
//   pg   <url>  <count> <start-file>   appends through openPostgresAuditLog, `WINDOW` in flight
//   file <path> <count> <start-file>   the same through the file log of @forge/audit-chain
// Opens the log, waits until <start-file> exists (so that all writers start together), appends,
// closes, then prints one JSON line {ms, count, batches}.
import { existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { openAuditLog } from '@forge/audit-chain';
import { openPostgresAuditLog } from '../dist/index.js';

const [mode, target, countArg, startFile] = process.argv.slice(2);
const count = Number(countArg);
const WINDOW = Number(process.env.BENCH_WINDOW ?? 2000);

/** About 500 bytes once written as a line: a realistic forge.called record (as audit-chain's bench). */
function entryData(i) {
  return {
    name: 'code.csv_filter',
    persona: 'analyst',
    session: 'sess-7f3a9c',
    task: `task-${i % 97}`,
    ok: i % 11 !== 0,
    run_id: `run-${i.toString(36).padStart(8, '0')}`,
    duration_ms: i % 1000,
    cache: i % 3 === 0 ? 'hit' : 'miss',
    input_digest: `sha256:${'3b'.repeat(32)}`,
    sandbox: 'bwrap',
    note: 'n'.repeat(12),
  };
}

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
