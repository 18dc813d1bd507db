// One benchmark child process. Modes:
//   append <log> <count> <start-file>   durable appends through the library, many in flight
//   append-notree <log> <count>         the same without the log's Merkle tree (tree: false)
//   plain  <file> <count> <start-file>  fs.appendFile of the same lines (no hash, no lock)
//   verify <log>                        verifyLog on one thread, then report peak memory
//   verify2 <log>                       the same with threads: 2
//   verify-tiles <log>                  verifyTiles, threads: 2: the tiles beside the log against its entries
//   verify-tiles1 <log>                 the same on one thread
// Waits until <start-file> exists so that all children start together, then prints one JSON line.
import { existsSync, readFileSync } from 'node:fs';
import { appendFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { openAuditLog, verifyLog, verifyTiles } from '../dist/index.js';
import { entryData, plainLine } from './data.mjs';

const [mode, path, countArg, startFile] = process.argv.slice(2);
const count = Number(countArg);

function peakMiB() {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

async function waitStart() {
  while (startFile && !existsSync(startFile)) await sleep(1);
}

if (mode === 'append' || mode === 'append-notree') {
  const log = await openAuditLog(path, mode === 'append-notree' ? { tree: false } : {});
  await waitStart();
  const t0 = performance.now();
  const window = [];
  for (let i = 0; i < count; i++) {
    window.push(log.append('forge.called', entryData(i)));
    if (window.length >= 2000) {
      await Promise.all(window);
      window.length = 0;
    }
  }
  await Promise.all(window);
  const ms = performance.now() - t0;
  await log.close();
  console.log(JSON.stringify({ ms, count }));
} else if (mode === 'plain') {
  await waitStart();
  const t0 = performance.now();
  for (let i = 0; i < count; i++) await appendFile(path, plainLine(i));
  console.log(JSON.stringify({ ms: performance.now() - t0, count }));
} else if (mode === 'verify' || mode === 'verify2') {
  const t0 = performance.now();
  const r = await verifyLog(path, { threads: mode === 'verify2' ? 2 : 1 });
  const ms = performance.now() - t0;
  if (!r.ok) throw new Error(`benchmark log does not verify: ${JSON.stringify(r.first_bad)}`);
  console.log(JSON.stringify({ ms, count: r.entries, peakMiB: peakMiB() }));
} else if (mode === 'verify-tiles' || mode === 'verify-tiles1') {
  const t0 = performance.now();
  const r = await verifyTiles(path, { threads: mode === 'verify-tiles' ? 2 : 1 });
  const ms = performance.now() - t0;
  if (!r.ok) throw new Error(`benchmark tiles do not match the log: ${JSON.stringify(r.first_bad)}`);
  console.log(JSON.stringify({ ms, count: r.size, peakMiB: peakMiB() }));
} else if (mode === 'hash') {
  // Baseline for verify that scales with the CPU: read, split and SHA-256 every line, nothing else.
  const { hash } = await import('node:crypto');
  const { open } = await import('node:fs/promises');
  const fh = await open(path, 'r');
  const buf = Buffer.allocUnsafe(2 << 20);
  let pos = 0;
  let lines = 0;
  let carry = 0;
  const t0 = performance.now();
  for (;;) {
    const { bytesRead } = await fh.read(buf, carry, buf.length - carry, pos);
    if (bytesRead === 0) break;
    pos += bytesRead;
    const end = carry + bytesRead;
    let start = 0;
    for (let nl = buf.indexOf(10, 0); nl >= 0 && nl < end; nl = buf.indexOf(10, start)) {
      hash('sha256', buf.subarray(start, nl - 75), 'hex');
      lines++;
      start = nl + 1;
    }
    buf.copy(buf, 0, start, end);
    carry = end - start;
  }
  await fh.close();
  console.log(JSON.stringify({ ms: performance.now() - t0, count: lines, peakMiB: peakMiB() }));
} else if (mode === 'read') {
  // Baseline for verify: read the file and find every line, nothing else.
  const { open } = await import('node:fs/promises');
  const fh = await open(path, 'r');
  const buf = Buffer.allocUnsafe(1 << 20);
  let pos = 0;
  let lines = 0;
  const t0 = performance.now();
  for (;;) {
    const { bytesRead } = await fh.read(buf, 0, buf.length, pos);
    if (bytesRead === 0) break;
    for (let i = buf.indexOf(10, 0); i >= 0 && i < bytesRead; i = buf.indexOf(10, i + 1)) lines++;
    pos += bytesRead;
  }
  await fh.close();
  console.log(JSON.stringify({ ms: performance.now() - t0, count: lines, peakMiB: peakMiB() }));
} else {
  throw new Error(`unknown mode ${mode}`);
}
