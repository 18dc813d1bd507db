import { existsSync } from 'node:fs';
import type { QueueStats } from '@forge/queue';
import type { Command } from '../command.js';
import { openStore } from '../store.js';

export const status: Command = {
  words: 'status',
  usage: 'forge status',
  summary: 'what runs now: front-ends, workers, the job queue and the head of the audit log',
  details: [
    'Front-ends (forge serve) and workers (forge worker) say they are alive every few seconds; one',
    'silent for 30 s, or whose process on this host is gone, is shown as gone. The audit head is the',
    'last entry (its number and hash): two readings that differ in hash at one number mean a forked',
    "log. With --store postgres://…, everything shown is the database's: every host's front-ends and",
    'workers. Reads only: a project without a queue gets none.',
  ],
  async run(_p, { out, where }) {
    const w = await where();
    const store = await openStore(w);
    let stats: QueueStats = { pending: 0, claimed: 0, done: 0, failed: 0 };
    let queueWhere = `${store.where}/queue`;
    let data: Record<string, unknown>;
    let members: Awaited<ReturnType<Awaited<ReturnType<typeof store.presence>>['list']>>;
    let head: Awaited<ReturnType<typeof store.auditHead>>;
    try {
      // A project that never had a queue has nothing in it: nothing is created to say so.
      if (store.kind === 'postgres' || existsSync(queueWhere)) {
        const q = await store.queue();
        queueWhere = q.where;
        stats = await q.stats();
      }
      [members, head] = await Promise.all([(await store.presence()).list(), store.auditHead()]);
      data = { store: { kind: store.kind, where: store.where }, members, queue: { where: queueWhere, ...stats }, audit: head };
    } finally {
      await store.close();
    }
    if (out.json) {
      out.data(data);
      return 0;
    }
    const s = out.style;
    const now = Date.now();
    out.line(`${s.bold('store:')} ${store.kind}  ${s.dim(store.where)}`);
    for (const kind of ['front-end', 'worker'] as const) {
      const of = members.filter((m) => m.kind === kind);
      out.line(s.bold(`${kind}s: ${of.filter((m) => m.alive).length} running`));
      for (const m of of) {
        const facts = Object.entries(m.facts ?? {})
          .map(([k, v]) => ` ${k}=${v}`)
          .join('');
        const gone = m.alive ? '' : `, ${s.red(`gone (last seen ${age(now - m.beatAt)} ago)`)}`;
        out.line(
          `  ${m.alive ? s.green('●') : s.red('○')} ${m.name.padEnd(24)} pid ${m.pid} on ${m.host}, up ${age(now - m.startedAt)}${gone}${facts}`,
        );
      }
    }
    const oldest = stats.oldestPendingMs !== undefined ? ` (oldest waiting ${age(stats.oldestPendingMs)})` : '';
    out.line(
      `${s.bold('queue:')} ${stats.pending} pending${oldest}, ${stats.claimed} running, ${stats.done} done, ${stats.failed} failed  ${s.dim(queueWhere)}`,
    );
    out.line(`${s.bold('audit:')} ${head.seq === 0 ? 'empty' : `head #${head.seq} ${head.hash}`}  ${s.dim(head.where)}`);
    return 0;
  },
};

/** `12 s`, `5 min`, `3 h`. */
function age(ms: number): string {
  if (ms < 120_000) return `${Math.max(0, Math.round(ms / 1000))} s`;
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`;
  return `${Math.round(ms / 3_600_000)} h`;
}
