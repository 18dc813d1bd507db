import { toolsmithFor } from '@forge/policy';
import type { Forge } from '@forge/runner';
import type { Toolsmith } from '@forge/toolsmith';
import { cycleSummary } from './toolsmith-format.js';

/** A running periodic cycle; `stop()` ends it (and waits for a cycle in progress). */
export interface PeriodicCycle {
  stop(): Promise<void>;
}

/** How often the policy's interval is looked at: an edit of it applies within this long. */
const POLL_MS = 5_000;

/**
 * Runs the toolsmith's cycle every `toolsmith.cycle_interval_seconds` for `forge serve`. The
 * interval is re-read from the policy every few seconds (an edit applies at once, counted from
 * the last cycle); while the toolsmith is off or paused (or the policy cannot be read) nothing
 * runs. The timer never keeps the process alive. What a cycle finds goes to `note` as one line,
 * only when a tool is wanted or a gateway server is absent.
 */
export function startPeriodicCycle(o: {
  forge: Forge;
  toolsmith: Toolsmith;
  note: (line: string) => void;
  now?: () => number;
}): PeriodicCycle {
  const now = o.now ?? Date.now;
  let last = now();
  let running: Promise<void> | undefined;

  const due = (): boolean => {
    const pol = o.forge.policy();
    if (!pol.ok) return false;
    const t = toolsmithFor(pol.snapshot, 'default');
    return t.enabled && !t.paused && now() - last >= t.cycleIntervalMs;
  };

  const tick = async (): Promise<void> => {
    last = now();
    try {
      const r = await o.toolsmith.cycle();
      if (!r.ok) return;
      const line = cycleSummary(r);
      if (line) o.note(line);
    } catch (err) {
      o.note(`forge toolsmith cycle failed: ${(err as Error).message}`);
    }
  };

  const timer = setInterval(() => {
    if (running || !due()) return;
    running = tick().finally(() => {
      running = undefined;
    });
  }, POLL_MS);
  timer.unref();

  return {
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}
