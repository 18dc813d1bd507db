import type { JobQueue } from '@forge/queue';
import { UsageError } from '../args.js';
import type { Command } from '../command.js';
import { openForge } from '../context.js';
import { keepPresent, sandboxFacts } from '../presence.js';
import { untilSignal } from '../signals.js';
import { openStore } from '../store.js';
import { VERSION } from '../version.js';

export const worker: Command = {
  words: 'worker',
  usage: 'forge worker [--concurrency N] [--name NAME] [--grace-ms N] [--store URL]',
  summary: "run the calls front-ends put in the project's job queue (`forge serve --workers N` starts these itself)",
  details: [
    '--concurrency N   calls run at once (default 1)',
    '--name NAME       this worker in leases and logs: letters, digits, _ and - (default <host>-<pid>)',
    '--grace-ms N      at SIGTERM/SIGINT, how long the calls held may finish (default 10000); then',
    '                  their tools are killed and the calls are answered as cancelled',
    'Each call is run through this engine: the persona ACL, policy, breakers and input validation',
    'again, the tool as the front-end resolved it (same digest), the sandbox, the run manifest and',
    'the audit entry. One line per call goes to stderr. The queue is <project>/.forge/queue, or the',
    "database's with --store postgres://… (workers on any number of hosts).",
  ],
  options: {
    concurrency: { type: 'string' },
    name: { type: 'string' },
    'grace-ms': { type: 'string' },
  },
  async run({ values }, { out, where }) {
    const concurrency = positive(values.concurrency, 1, '--concurrency', this.usage);
    const graceMs = values['grace-ms'] === undefined ? 10_000 : positive(values['grace-ms'], 0, '--grace-ms', this.usage, true);
    const name = typeof values.name === 'string' && values.name !== '' ? values.name : undefined;
    const stop = untilSignal();
    try {
      const w = await where();
      const store = await openStore(w);
      let engine: Awaited<ReturnType<typeof openForge>>;
      let queue: JobQueue;
      try {
        queue = await store.queue();
        engine = await openForge(w, { server: true, store });
      } catch (err) {
        await store.close().catch(() => {});
        throw err;
      }
      const ac = new AbortController();
      // Loaded here, not at the CLI's start (every command would pay for the runner and the sandbox).
      const [{ defaultWorkerName }, { prebuiltStats }] = await Promise.all([import('@forge/runner'), import('@forge/sandbox')]);
      const present = keepPresent(
        await store.presence(),
        { name: name ?? defaultWorkerName(), kind: 'worker', facts: () => ({ concurrency, ...sandboxFacts(prebuiltStats()) }) },
        (l) => out.note(l),
      );
      let working: Promise<void> | undefined;
      try {
        out.note(
          `forge ${VERSION}: worker on ${queue.kind} queue ${queue.where}, ${concurrency} at once (project ${w.project}, pid ${process.pid}); Ctrl-C stops`,
        );
        const run = engine.forge.work({
          queue,
          signal: ac.signal,
          concurrency,
          ...(name ? { worker: name } : {}),
          onJob: (j) =>
            out.note(
              `forge worker: ${j.id} ${j.name ?? '?'} ${j.ok ? 'ok' : (j.kind ?? 'failed')} in ${j.ms} ms (attempt ${j.attempt}${j.from === 'run' ? '' : `, ${j.from}`})`,
            ),
        });
        working = run;
        const signal = await Promise.race([stop.promise, run.then(() => undefined)]);
        if (signal) {
          out.note(`forge worker: ${signal}: taking no new calls; the calls held have ${graceMs} ms to finish`);
          ac.abort(new Error(`the worker is shutting down (${signal})`));
        }
      } finally {
        ac.abort();
        // The engine waits for the calls held (then kills their tools); the queue keeps their
        // leases renewed until they are finished.
        try {
          await engine.close({ graceMs });
          await working?.catch(() => {});
        } finally {
          await present.stop();
          await store.close();
        }
      }
    } finally {
      stop.dispose();
    }
    return 0;
  },
};

/** A whole number from a flag, at least `min`. */
function positive(v: unknown, fallback: number, flag: string, usage: string, zero = false): number {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (typeof v !== 'string' || !/^\d+$/.test(v) || !Number.isSafeInteger(n) || n < (zero ? 0 : 1))
    throw new UsageError(`${flag} expects a whole number${zero ? '' : ' of at least 1'} (got "${String(v)}")`, usage);
  return n;
}
