import type { Denial } from './decisions.js';
import type { BreakerSettings } from './document.js';

/** Which breaker: the per-tool rate, the per-tool failure circuit, or the per-session forge count. */
export type BreakerKind = 'rate' | 'failure' | 'forge_count';

export type BreakerEvent =
  | {
      type: 'breaker.open';
      breaker: BreakerKind;
      /** The tool (rate, failure) or session (forge_count). */
      name: string;
      /** When it lets calls through again (ISO 8601); null when only a policy change or a new session resets it. */
      reset_at: string | null;
      reason: string;
    }
  | { type: 'breaker.closed'; breaker: BreakerKind; name: string };

export interface BreakersOptions {
  /** Milliseconds since the epoch (default `Date.now`); inject a fake clock in tests. */
  now?: () => number;
  onEvent?: (event: BreakerEvent) => void;
}

/** The state of one tool's breakers, for `forge doctor`-style displays and tests. */
export interface ToolBreakerState {
  circuit: 'closed' | 'open' | 'half_open';
  consecutiveFailures: number;
  /** Tokens left in the rate bucket (fractional while refilling). */
  tokens: number;
}

interface ToolState {
  tokens: number;
  refilledAt: number;
  rateOpen: boolean;
  failures: number;
  circuit: 'closed' | 'open' | 'half_open';
  openedAt: number;
  trialInFlight: boolean;
}

/** A breaker check: allowed (and whether as a half-open circuit's one trial call), or refused. */
export type BreakerDecision = { ok: true; trial: boolean } | (Denial & { retryAfterMs: number | null });

/**
 * The breakers of one session: a token bucket per tool (`per_tool_rpm`), a circuit per tool
 * (closed → open after `failure_threshold` consecutive failures → half-open after `cooldown_s`,
 * letting one trial call through → closed on its success, open again on its failure), and a
 * count of tools forged (`per_session_forge_count`).
 *
 * Every check takes the settings in force, so a policy reload applies new thresholds at once
 * without resetting any state. Only real tool failures should be recorded: validation errors
 * and policy denials are the caller's, not the tool's.
 */
export class Breakers {
  readonly #now: () => number;
  readonly #onEvent: (event: BreakerEvent) => void;
  readonly #tools = new Map<string, ToolState>();
  #forged = 0;
  #forgeOpen = false;

  constructor(options: BreakersOptions = {}) {
    this.#now = options.now ?? Date.now;
    this.#onEvent = options.onEvent ?? (() => {});
  }

  #tool(name: string, s: BreakerSettings, now: number): ToolState {
    let t = this.#tools.get(name);
    if (!t) {
      t = { tokens: s.per_tool_rpm, refilledAt: now, rateOpen: false, failures: 0, circuit: 'closed', openedAt: 0, trialInFlight: false };
      this.#tools.set(name, t);
    }
    // Refill at per_tool_rpm per minute, never above the (current) capacity.
    t.tokens = Math.min(s.per_tool_rpm, t.tokens + ((now - t.refilledAt) * s.per_tool_rpm) / 60_000);
    t.refilledAt = now;
    return t;
  }

  /**
   * Whether `tool` may be called now; when it may, takes one token (and, for a half-open circuit,
   * the one trial slot). A denial is `breaker_open` with when to retry.
   */
  checkCall(tool: string, settings: BreakerSettings): BreakerDecision {
    const now = this.#now();
    const t = this.#tool(tool, settings, now);
    const cooldown = settings.cooldown_s * 1000;
    let trial = false;
    if (t.circuit !== 'closed') {
      if (t.circuit === 'open' && now >= t.openedAt + cooldown) t.circuit = 'half_open';
      if (t.circuit === 'open' || t.trialInFlight) {
        const retry = t.circuit === 'open' ? t.openedAt + cooldown - now : cooldown;
        return {
          ok: false,
          kind: 'breaker_open',
          message: `tool "${tool}" failed ${t.failures} times in a row, so its breaker is open; ${
            t.circuit === 'open' ? `it lets one trial call through in ${Math.ceil(retry / 1000)} s` : 'a trial call is running now'
          } (breakers.failure_threshold ${settings.failure_threshold}, cooldown_s ${settings.cooldown_s})`,
          retryAfterMs: retry,
        };
      }
      trial = true;
    }
    if (t.tokens < 1) {
      const retry = Math.ceil(((1 - t.tokens) * 60_000) / settings.per_tool_rpm);
      if (!t.rateOpen) {
        t.rateOpen = true;
        this.#onEvent({
          type: 'breaker.open',
          breaker: 'rate',
          name: tool,
          reset_at: new Date(now + retry).toISOString(),
          reason: `more than ${settings.per_tool_rpm} calls in a minute`,
        });
      }
      return {
        ok: false,
        kind: 'breaker_open',
        message: `tool "${tool}" was called more than ${settings.per_tool_rpm} times in a minute (breakers.per_tool_rpm); retry in ${Math.ceil(retry / 1000)} s`,
        retryAfterMs: retry,
      };
    }
    if (t.rateOpen) {
      t.rateOpen = false;
      this.#onEvent({ type: 'breaker.closed', breaker: 'rate', name: tool });
    }
    t.tokens -= 1;
    if (trial) t.trialInFlight = true;
    return { ok: true, trial };
  }

  /**
   * Records how a call that {@link checkCall} let through ended: `success`, a tool `failure`
   * (crash, timeout, limit, invalid output), or `none` when it ended before the tool ran for a
   * reason that is not the tool's (invalid input, a later policy denial). Pass the `trial` flag
   * `checkCall` returned: while a circuit is open or half-open only its trial call's outcome
   * counts (a late answer from a call let through earlier is stale); `none` frees the trial slot.
   */
  recordOutcome(tool: string, outcome: 'success' | 'failure' | 'none', settings: BreakerSettings, trial = false): void {
    const now = this.#now();
    const t = this.#tool(tool, settings, now);
    if (t.circuit !== 'closed' && !trial) return;
    const wasTrial = trial && t.trialInFlight;
    if (trial) t.trialInFlight = false;
    if (outcome === 'none') return;
    if (outcome === 'success') {
      t.failures = 0;
      if (t.circuit !== 'closed') {
        t.circuit = 'closed';
        this.#onEvent({ type: 'breaker.closed', breaker: 'failure', name: tool });
      }
      return;
    }
    t.failures++;
    if ((t.circuit === 'closed' && t.failures >= settings.failure_threshold) || (t.circuit === 'half_open' && wasTrial)) {
      t.circuit = 'open';
      t.openedAt = now;
      this.#onEvent({
        type: 'breaker.open',
        breaker: 'failure',
        name: tool,
        reset_at: new Date(now + settings.cooldown_s * 1000).toISOString(),
        reason: wasTrial ? 'the trial call after the cool-down failed' : `${t.failures} consecutive failures`,
      });
    }
  }

  /** Whether this session may forge one more tool; when it may, counts it. */
  checkForge(session: string, settings: BreakerSettings): BreakerDecision {
    if (this.#forged >= settings.per_session_forge_count) {
      if (!this.#forgeOpen) {
        this.#forgeOpen = true;
        this.#onEvent({
          type: 'breaker.open',
          breaker: 'forge_count',
          name: session,
          reset_at: null,
          reason: `${this.#forged} ${this.#forged === 1 ? 'tool' : 'tools'} forged in this session`,
        });
      }
      return {
        ok: false,
        kind: 'breaker_open',
        message: `session "${session}" has forged ${this.#forged} ${this.#forged === 1 ? 'tool' : 'tools'}, the most breakers.per_session_forge_count (${settings.per_session_forge_count}) allows; reuse a tool (forge_list) or start a new session`,
        retryAfterMs: null,
      };
    }
    if (this.#forgeOpen) {
      this.#forgeOpen = false;
      this.#onEvent({ type: 'breaker.closed', breaker: 'forge_count', name: session });
    }
    this.#forged++;
    return { ok: true, trial: false };
  }

  /** The breakers of `tool` as of now (fresh tools are closed with a full bucket). */
  state(tool: string, settings: BreakerSettings): ToolBreakerState {
    const now = this.#now();
    const t = this.#tools.get(tool);
    if (!t) return { circuit: 'closed', consecutiveFailures: 0, tokens: settings.per_tool_rpm };
    const tokens = Math.min(settings.per_tool_rpm, t.tokens + ((now - t.refilledAt) * settings.per_tool_rpm) / 60_000);
    const circuit = t.circuit === 'open' && now >= t.openedAt + settings.cooldown_s * 1000 ? 'half_open' : t.circuit;
    return { circuit, consecutiveFailures: t.failures, tokens };
  }
}
