// The child process of the job queue suite (queue.ts). Arguments:
//   <opener module> <opener export> <spec JSON> <options JSON> <action> [args...]
// The opener is called as `open(spec, options)` and returns a JobQueue; it arms the crash hook of
// its implementation from FORGE_QUEUE_CRASH_AT (a step name) and FORGE_QUEUE_CRASH_SKIP (hits to
// let pass first), killing the process with SIGKILL right after that step.
// Every acknowledged operation is printed as one JSON line on stdout once it has resolved.
// Actions:
//   publish <id>...        publish each (payload {id}), in order
//   drain <worker> [go]    wait for the file <go> (if given), then claim and finish ({by}) until empty
//   serve <worker>         next() and finish ({by}) until SIGTERM
//   hold <worker>          claim one job and keep it (the queue renews the lease) until killed
//   note <worker>          claim one job, save the note {step: 1}
//   finish <worker>        claim one job and finish it as done with {by: 'child'}
//   recover <offsetMs>     recover({ now: Date.now() + offsetMs })
import { existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

const [modulePath, exportName, specJson, optionsJson, action, ...args] = process.argv.slice(2);
const mod = await import(modulePath);
const queue = await mod[exportName](JSON.parse(specJson), JSON.parse(optionsJson));
const say = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);

if (action === 'publish') {
  for (const id of args) {
    try {
      await queue.publish({ id, payload: { id } });
      say({ published: id });
    } catch (err) {
      say({ refused: id, code: err.code });
    }
  }
} else if (action === 'drain') {
  const [worker, go] = args;
  while (go && !existsSync(go)) await sleep(2);
  for (;;) {
    const job = await queue.claim(worker);
    if (!job) break;
    say({ claimed: job.id, attempt: job.attempt });
    say({ finished: job.id, outcome: await queue.finish(job, { status: 'done', payload: { by: worker } }) });
  }
} else if (action === 'serve') {
  const [worker] = args;
  const stop = new AbortController();
  process.on('SIGTERM', () => stop.abort());
  say({ ready: worker });
  for (;;) {
    const job = await queue.next(worker, { signal: stop.signal });
    if (!job) break;
    say({ claimed: job.id, attempt: job.attempt });
    say({ finished: job.id, outcome: await queue.finish(job, { status: 'done', payload: { by: worker } }) });
  }
} else if (action === 'hold') {
  const job = await queue.claim(args[0]);
  say({ claimed: job?.id, attempt: job?.attempt });
  await new Promise(() => setInterval(() => undefined, 1000));
} else if (action === 'note') {
  const job = await queue.claim(args[0]);
  say({ claimed: job?.id, attempt: job?.attempt });
  await queue.note(job, { step: 1 });
  say({ noted: job.id });
} else if (action === 'finish') {
  const job = await queue.claim(args[0]);
  say({ claimed: job?.id, attempt: job?.attempt });
  say({ finished: job.id, outcome: await queue.finish(job, { status: 'done', payload: { by: 'child' } }) });
} else if (action === 'recover') {
  say({ recovered: await queue.recover({ now: Date.now() + Number(args[0]) }) });
} else {
  throw new Error(`unknown action ${action}`);
}
await queue.close();
process.exit(0);
