import { hostname } from 'node:os';
import type { Member, PresenceStore } from '@forge/queue';

/** How often a running front-end or worker says it is alive. */
const BEAT_MS = 5_000;

/**
 * Keeps `member`'s presence record fresh while it runs (a beat now, then every few seconds; a
 * failed beat is reported once, never fatal) until `stop`, which removes the record.
 */
export function keepPresent(
  store: PresenceStore,
  member: Pick<Member, 'name' | 'kind'> & { facts?: Member['facts'] },
  note: (line: string) => void,
): { stop(): Promise<void> } {
  const record = { ...member, host: hostname(), pid: process.pid, startedAt: Date.now() };
  let warned = false;
  const beat = () =>
    store.beat(record).catch((err: unknown) => {
      if (!warned) note(`forge: cannot record this ${member.kind}'s presence (forge status will not show it): ${(err as Error).message}`);
      warned = true;
    });
  void beat();
  const timer = setInterval(beat, BEAT_MS);
  timer.unref();
  return {
    async stop() {
      clearInterval(timer);
      await store.leave(member.name).catch(() => {});
    },
  };
}
