import { hostname } from 'node:os';
import type { Member, PresenceStore } from '@forge/queue';
import type { PrebuiltStats } from '@forge/sandbox';

/** How often a running front-end or worker says it is alive. */
const BEAT_MS = 5_000;

/**
 * Keeps `member`'s presence record fresh while it runs (a beat now, then every few seconds; a
 * failed beat is reported once, never fatal) until `stop`, which removes the record. Facts given
 * as a function are read again at every beat (what changes as it runs: its warm sandboxes).
 */
export function keepPresent(
  store: PresenceStore,
  member: Pick<Member, 'name' | 'kind'> & { facts?: Member['facts'] | (() => Member['facts']) },
  note: (line: string) => void,
): { stop(): Promise<void> } {
  const { facts, ...rest } = member;
  const base = { ...rest, host: hostname(), pid: process.pid, startedAt: Date.now() };
  let warned = false;
  const beat = () =>
    store.beat({ ...base, ...factsNow(facts) }).catch((err: unknown) => {
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

function factsNow(facts: Member['facts'] | (() => Member['facts']) | undefined): { facts?: Member['facts'] } {
  const now = typeof facts === 'function' ? facts() : facts;
  return now ? { facts: now } : {};
}

const MIB = 1 << 20;
/** How long a time memory held back a warm sandbox stays in the facts. */
const HELD_SHOWN_MS = 10 * 60_000;

/**
 * This process's sandboxes built ahead (`prebuiltStats()` of @forge/sandbox), as presence facts:
 * `warm`, what waits (ready and warming) and the memory the warm ones hold against their budget;
 * `warm_held`, when memory last kept one from being warmed (its calls then started cold), within
 * the last ten minutes.
 */
export function sandboxFacts(st: PrebuiltStats): Record<string, string> {
  const waiting = st.pools.map((p) => `${p.label}${p.warm ? '' : ' (built)'} ${p.ready}${p.building ? `+${p.building}` : ''}`);
  const mib = (b: number) => `${Math.round(b / MIB)} MiB`;
  const facts: Record<string, string> = {
    warm: `${waiting.length ? waiting.join(', ') : 'none waiting'}; ${mib(st.warmBytes)} of ${mib(st.warmBudgetBytes)}`,
  };
  if (st.held && Date.now() - st.held.at < HELD_SHOWN_MS) {
    const ago = Math.round((Date.now() - st.held.at) / 1000);
    facts.warm_held = `${st.held.label}: needed ${mib(st.held.neededBytes)} of ${mib(st.held.budgetBytes)}${st.held.availableBytes !== undefined ? ` (host has ${mib(st.held.availableBytes)} available)` : ''}, ${ago} s ago: its calls started cold`;
  }
  return facts;
}
