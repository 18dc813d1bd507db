// One benchmark worker process. Modes:
//   serve <dir>        next() → finish(done) until SIGTERM (prints "ready" once waiting)
//   drain <dir> <go>   wait until the file <go> exists, then claim → finish until the queue is empty
//   pipe               read JSON lines on stdin, answer each with a line on stdout (the baseline)
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { openFileQueue } from '../dist/index.js';

const [mode, dir, go] = process.argv.slice(2);
const worker = `bench-${process.pid}`;

if (mode === 'serve') {
  const q = await openFileQueue(dir);
  const stop = new AbortController();
  process.on('SIGTERM', () => stop.abort());
  process.stdout.write('ready\n');
  for (;;) {
    const job = await q.next(worker, { signal: stop.signal });
    if (!job) break;
    await q.finish(job, { status: 'done', payload: { echo: job.payload } });
  }
  await q.close();
} else if (mode === 'drain') {
  const q = await openFileQueue(dir);
  while (!existsSync(go)) await sleep(1);
  let n = 0;
  for (let job = await q.claim(worker); job; job = await q.claim(worker)) {
    await q.finish(job, { status: 'done', payload: { echo: job.payload } });
    n++;
  }
  await q.close();
  process.stdout.write(`${JSON.stringify({ n })}\n`);
} else if (mode === 'pipe') {
  const rl = createInterface({ input: process.stdin });
  process.stdout.write('ready\n');
  for await (const line of rl) {
    const req = JSON.parse(line);
    process.stdout.write(`${JSON.stringify({ id: req.id, status: 'done', payload: { echo: req.payload } })}\n`);
  }
}
process.exit(0);
