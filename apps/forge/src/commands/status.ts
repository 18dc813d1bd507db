import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { QueueStats } from '@forge/queue';
import type { Command } from '../command.js';
import { openQueue, type Where } from '../context.js';
import { openPresence } from '../presence.js';

export const status: Command = {
  words: 'status',
  usage: 'forge status',
  summary: 'what runs here now: front-ends, workers, the job queue and the head of the audit log',
  details: [
    'Front-ends (forge serve) and workers (forge worker) say they are alive every few seconds; one',
    'silent for 30 s, or whose process is gone, is shown as gone. The audit head is the last entry',
    '(its number and hash): two readings that differ in hash at one number mean a forked log.',
    'Reads only: it writes nothing and takes no lock.',
  ],
  async run(_p, { out, where }) {
    const w = await where();
    const presence = await openPresence(w);
    const queueDir = join(w.project, '.forge', 'queue');
    let queue: { kind: string; where: string } = { kind: 'file', where: queueDir };
    let stats: QueueStats = { pending: 0, claimed: 0, done: 0, failed: 0 };
    // A project that never had a queue has nothing in it: nothing is created to say so.
    if (existsSync(queueDir)) {
      const q = await openQueue(w);
      queue = q;
      try {
        stats = await q.stats();
      } finally {
        await q.close();
      }
    }
    const [members, head] = await Promise.all([presence.list(), auditHead(w)]);
    const data = {
      store: { kind: 'files', home: w.home, project: w.project },
      members,
      queue: { kind: queue.kind, where: queue.where, ...stats },
      audit: head,
    };
    if (out.json) {
      out.data(data);
      return 0;
    }
    const s = out.style;
    const now = Date.now();
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
      `${s.bold('queue:')} ${stats.pending} pending${oldest}, ${stats.claimed} running, ${stats.done} done, ${stats.failed} failed  ${s.dim(queue.where)}`,
    );
    out.line(`${s.bold('audit:')} ${head.seq === 0 ? 'empty' : `head #${head.seq} ${head.hash}`}  ${s.dim(head.log)}`);
    return 0;
  },
};

/** The last entry of the audit log, read without opening it for writing (0 and no hash when empty). */
async function auditHead(w: Where): Promise<{ log: string; seq: number; hash: string }> {
  const log = join(w.home, 'audit', 'forge.log');
  if (!existsSync(log)) return { log, seq: 0, hash: '' };
  const { tailLog } = await import('@forge/audit-chain');
  let last: { seq: number; hash: string } = { seq: 0, hash: '' };
  for await (const e of tailLog(log, { last: 1 })) last = { seq: e.seq, hash: e.hash };
  return { log, ...last };
}

/** `12 s`, `5 min`, `3 h`. */
function age(ms: number): string {
  if (ms < 120_000) return `${Math.max(0, Math.round(ms / 1000))} s`;
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`;
  return `${Math.round(ms / 3_600_000)} h`;
}
