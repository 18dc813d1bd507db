/**
 * The breakers of a session, driven by a fake clock: the per-tool token bucket, the per-tool
 * failure circuit (closed → open → half-open → closed/open), the per-session forge count, and
 * settings that change under them (a policy reload) without resetting their state.
 */
import { describe, expect, it } from 'vitest';
import { type BreakerEvent, type BreakerSettings, Breakers } from '../src/index.js';

const T0 = Date.parse('2030-01-01T00:00:00.000Z');
const iso = (ms: number) => new Date(ms).toISOString();

/** Breakers on a clock the test moves (`clock.t`), recording every event. */
function setup() {
  const clock = { t: T0 };
  const events: BreakerEvent[] = [];
  const breakers = new Breakers({ now: () => clock.t, onEvent: (e) => events.push(e) });
  return { clock, events, breakers };
}

function settings(over: Partial<BreakerSettings> = {}): BreakerSettings {
  return { per_tool_rpm: 1000, per_session_forge_count: 50, failure_threshold: 3, cooldown_s: 10, ...over };
}

describe('rate: a token bucket of per_tool_rpm calls a minute', () => {
  it('lets exactly per_tool_rpm calls through, then refuses with when to retry', () => {
    const { breakers, events } = setup();
    const s = settings({ per_tool_rpm: 3 });
    expect(breakers.state('fib', s)).toEqual({ circuit: 'closed', consecutiveFailures: 0, tokens: 3 });
    for (let i = 0; i < 3; i++) expect(breakers.checkCall('fib', s)).toEqual({ ok: true, trial: false });
    const d = breakers.checkCall('fib', s);
    expect(d).toEqual({ ok: false, kind: 'breaker_open', message: expect.any(String), retryAfterMs: 20_000 });
    expect(d.ok ? '' : d.message).toMatchInlineSnapshot(
      `"tool "fib" was called more than 3 times in a minute (breakers.per_tool_rpm); retry in 20 s"`,
    );
    expect(events).toEqual([
      { type: 'breaker.open', breaker: 'rate', name: 'fib', reset_at: iso(T0 + 20_000), reason: 'more than 3 calls in a minute' },
    ]);
  });

  it('emits one breaker.open per trip, and breaker.closed on the next allowed call', () => {
    const { breakers, events, clock } = setup();
    const s = settings({ per_tool_rpm: 3 });
    for (let i = 0; i < 3; i++) breakers.checkCall('fib', s);
    for (let i = 0; i < 5; i++) expect(breakers.checkCall('fib', s).ok).toBe(false);
    clock.t += 5_000;
    // A quarter of a token has come back: three quarters to go.
    expect(breakers.checkCall('fib', s)).toMatchObject({ ok: false, retryAfterMs: 15_000 });
    expect(events).toHaveLength(1);
    clock.t = T0 + 20_000;
    expect(breakers.checkCall('fib', s)).toEqual({ ok: true, trial: false });
    expect(events).toEqual([
      { type: 'breaker.open', breaker: 'rate', name: 'fib', reset_at: iso(T0 + 20_000), reason: 'more than 3 calls in a minute' },
      { type: 'breaker.closed', breaker: 'rate', name: 'fib' },
    ]);
    // The bucket is empty again: the next trip is a new event.
    expect(breakers.checkCall('fib', s).ok).toBe(false);
    expect(events.slice(2)).toEqual([
      { type: 'breaker.open', breaker: 'rate', name: 'fib', reset_at: iso(T0 + 40_000), reason: 'more than 3 calls in a minute' },
    ]);
  });

  it('refills at per_tool_rpm a minute, never above per_tool_rpm', () => {
    const { breakers, clock } = setup();
    const s = settings({ per_tool_rpm: 6 });
    for (let i = 0; i < 6; i++) breakers.checkCall('fib', s);
    expect(breakers.state('fib', s).tokens).toBe(0);
    clock.t += 25_000;
    expect(breakers.state('fib', s).tokens).toBe(2.5);
    expect(breakers.checkCall('fib', s)).toEqual({ ok: true, trial: false });
    expect(breakers.checkCall('fib', s)).toEqual({ ok: true, trial: false });
    expect(breakers.checkCall('fib', s).ok).toBe(false);
    clock.t += 3_600_000;
    expect(breakers.state('fib', s).tokens).toBe(6);
    for (let i = 0; i < 6; i++) expect(breakers.checkCall('fib', s)).toEqual({ ok: true, trial: false });
    expect(breakers.checkCall('fib', s).ok).toBe(false);
  });

  it('keeps one bucket per tool', () => {
    const { breakers } = setup();
    const s = settings({ per_tool_rpm: 1 });
    expect(breakers.checkCall('a', s)).toEqual({ ok: true, trial: false });
    expect(breakers.checkCall('a', s).ok).toBe(false);
    expect(breakers.checkCall('b', s)).toEqual({ ok: true, trial: false });
  });

  it('uses the real clock by default', () => {
    const b = new Breakers();
    expect(b.checkCall('fib', settings({ per_tool_rpm: 1 }))).toEqual({ ok: true, trial: false });
    expect(b.checkCall('fib', settings({ per_tool_rpm: 1 }))).toMatchObject({ ok: false, kind: 'breaker_open' });
  });
});

/** One call of `tool` that ran and ended with `outcome`; fails the test if it was refused. */
function call(b: Breakers, tool: string, s: BreakerSettings, outcome: 'success' | 'failure' | 'none') {
  const d = b.checkCall(tool, s);
  expect(d.ok).toBe(true);
  b.recordOutcome(tool, outcome, s, d.ok && d.trial);
}

describe('failure circuit', () => {
  it('opens after failure_threshold consecutive failures, with reset_at = now + cooldown', () => {
    const { breakers, events, clock } = setup();
    const s = settings();
    call(breakers, 'fib', s, 'failure');
    clock.t += 1000;
    call(breakers, 'fib', s, 'failure');
    expect(breakers.state('fib', s)).toMatchObject({ circuit: 'closed', consecutiveFailures: 2 });
    expect(events).toEqual([]);
    clock.t += 1000;
    call(breakers, 'fib', s, 'failure');
    expect(events).toEqual([
      { type: 'breaker.open', breaker: 'failure', name: 'fib', reset_at: iso(T0 + 12_000), reason: '3 consecutive failures' },
    ]);
    expect(breakers.state('fib', s)).toMatchObject({ circuit: 'open', consecutiveFailures: 3 });
  });

  it('refuses calls while open, saying when the trial comes, without taking tokens', () => {
    const { breakers, clock } = setup();
    const s = settings({ per_tool_rpm: 10 });
    for (let i = 0; i < 3; i++) call(breakers, 'fib', s, 'failure');
    clock.t += 3_500;
    const d = breakers.checkCall('fib', s);
    expect(d).toEqual({ ok: false, kind: 'breaker_open', message: expect.any(String), retryAfterMs: 6_500 });
    expect(d.ok ? '' : d.message).toMatchInlineSnapshot(
      `"tool "fib" failed 3 times in a row, so its breaker is open; it lets one trial call through in 7 s (breakers.failure_threshold 3, cooldown_s 10)"`,
    );
    for (let i = 0; i < 20; i++) expect(breakers.checkCall('fib', s).ok).toBe(false);
    expect(breakers.state('fib', s).tokens).toBeCloseTo(7 + (3_500 * 10) / 60_000, 9);
    expect(breakers.checkCall('other', s)).toEqual({ ok: true, trial: false });
  });

  it('half-opens after the cool-down and lets exactly one trial through', () => {
    const { breakers, events, clock } = setup();
    const s = settings();
    for (let i = 0; i < 3; i++) call(breakers, 'fib', s, 'failure');
    clock.t += 9_999;
    expect(breakers.state('fib', s).circuit).toBe('open');
    expect(breakers.checkCall('fib', s)).toMatchObject({ ok: false, retryAfterMs: 1 });
    clock.t += 1;
    expect(breakers.state('fib', s).circuit).toBe('half_open');
    expect(breakers.checkCall('fib', s)).toEqual({ ok: true, trial: true });
    // A second, concurrent call while the trial runs is refused.
    const second = breakers.checkCall('fib', s);
    expect(second).toEqual({ ok: false, kind: 'breaker_open', message: expect.any(String), retryAfterMs: 10_000 });
    expect(second.ok ? '' : second.message).toMatchInlineSnapshot(
      `"tool "fib" failed 3 times in a row, so its breaker is open; a trial call is running now (breakers.failure_threshold 3, cooldown_s 10)"`,
    );
    expect(events.map((e) => e.type)).toEqual(['breaker.open']);
  });

  it('closes when the trial succeeds', () => {
    const { breakers, events, clock } = setup();
    const s = settings();
    for (let i = 0; i < 3; i++) call(breakers, 'fib', s, 'failure');
    clock.t += 10_000;
    call(breakers, 'fib', s, 'success');
    expect(events.slice(1)).toEqual([{ type: 'breaker.closed', breaker: 'failure', name: 'fib' }]);
    expect(breakers.state('fib', s)).toMatchObject({ circuit: 'closed', consecutiveFailures: 0 });
    // Closed again: calls flow, and it takes a full threshold of failures to reopen.
    call(breakers, 'fib', s, 'failure');
    call(breakers, 'fib', s, 'failure');
    expect(breakers.checkCall('fib', s)).toEqual({ ok: true, trial: false });
    expect(events).toHaveLength(2);
  });

  it('reopens when the trial fails, for another cool-down', () => {
    const { breakers, events, clock } = setup();
    const s = settings();
    for (let i = 0; i < 3; i++) call(breakers, 'fib', s, 'failure');
    clock.t += 15_000;
    call(breakers, 'fib', s, 'failure');
    expect(events.slice(1)).toEqual([
      {
        type: 'breaker.open',
        breaker: 'failure',
        name: 'fib',
        reset_at: iso(T0 + 25_000),
        reason: 'the trial call after the cool-down failed',
      },
    ]);
    expect(breakers.state('fib', s)).toMatchObject({ circuit: 'open', consecutiveFailures: 4 });
    clock.t += 9_000;
    expect(breakers.checkCall('fib', s)).toMatchObject({ ok: false, retryAfterMs: 1_000 });
    clock.t += 1_000;
    expect(breakers.checkCall('fib', s)).toEqual({ ok: true, trial: true });
  });

  it('a `none` outcome frees the trial slot and changes nothing else', () => {
    const { breakers, events, clock } = setup();
    const s = settings();
    for (let i = 0; i < 3; i++) call(breakers, 'fib', s, 'failure');
    clock.t += 10_000;
    call(breakers, 'fib', s, 'none');
    expect(events).toHaveLength(1);
    expect(breakers.state('fib', s)).toMatchObject({ circuit: 'half_open', consecutiveFailures: 3 });
    // The slot is free again: exactly one more trial.
    expect(breakers.checkCall('fib', s)).toEqual({ ok: true, trial: true });
    expect(breakers.checkCall('fib', s).ok).toBe(false);
  });

  it('ignores a late outcome of a call let through before the circuit opened: only the trial counts', () => {
    const { breakers, events, clock } = setup();
    const s = settings();
    const early = breakers.checkCall('fib', s); // still running when the circuit opens
    expect(early).toEqual({ ok: true, trial: false });
    for (let i = 0; i < 3; i++) call(breakers, 'fib', s, 'failure');
    clock.t += 10_000;
    const trial = breakers.checkCall('fib', s);
    expect(trial).toEqual({ ok: true, trial: true });
    // The early call answers now: stale, it neither closes the circuit nor frees the trial slot.
    breakers.recordOutcome('fib', 'success', s, false);
    expect(breakers.state('fib', s).circuit).toBe('half_open');
    expect(breakers.checkCall('fib', s).ok).toBe(false);
    breakers.recordOutcome('fib', 'success', s, true);
    expect(breakers.state('fib', s)).toMatchObject({ circuit: 'closed', consecutiveFailures: 0 });
    expect(events.map((e) => e.type)).toEqual(['breaker.open', 'breaker.closed']);
  });

  it('a `none` outcome on a closed circuit keeps the failure count', () => {
    const { breakers } = setup();
    const s = settings();
    call(breakers, 'fib', s, 'failure');
    call(breakers, 'fib', s, 'failure');
    call(breakers, 'fib', s, 'none');
    expect(breakers.state('fib', s)).toMatchObject({ circuit: 'closed', consecutiveFailures: 2 });
    call(breakers, 'fib', s, 'failure');
    expect(breakers.state('fib', s).circuit).toBe('open');
  });

  it('a success resets the consecutive count', () => {
    const { breakers, events } = setup();
    const s = settings();
    call(breakers, 'fib', s, 'failure');
    call(breakers, 'fib', s, 'failure');
    call(breakers, 'fib', s, 'success');
    expect(breakers.state('fib', s)).toMatchObject({ circuit: 'closed', consecutiveFailures: 0 });
    call(breakers, 'fib', s, 'failure');
    call(breakers, 'fib', s, 'failure');
    expect(breakers.state('fib', s)).toMatchObject({ circuit: 'closed', consecutiveFailures: 2 });
    expect(events).toEqual([]);
    call(breakers, 'fib', s, 'failure');
    expect(events.map((e) => [e.type, e.breaker])).toEqual([['breaker.open', 'failure']]);
  });

  it('keeps one circuit per tool', () => {
    const { breakers } = setup();
    const s = settings({ failure_threshold: 1 });
    call(breakers, 'a', s, 'failure');
    expect(breakers.checkCall('a', s).ok).toBe(false);
    expect(breakers.checkCall('b', s)).toEqual({ ok: true, trial: false });
  });
});

describe('forge count per session', () => {
  it('lets per_session_forge_count tools be forged, then refuses with no reset time', () => {
    const { breakers, events } = setup();
    const s = settings({ per_session_forge_count: 2 });
    expect(breakers.checkForge('s1', s)).toEqual({ ok: true, trial: false });
    expect(breakers.checkForge('s1', s)).toEqual({ ok: true, trial: false });
    const d = breakers.checkForge('s1', s);
    expect(d).toEqual({ ok: false, kind: 'breaker_open', message: expect.any(String), retryAfterMs: null });
    expect(d.ok ? '' : d.message).toMatchInlineSnapshot(
      `"session "s1" has forged 2 tools, the most breakers.per_session_forge_count (2) allows; reuse a tool (forge_list) or start a new session"`,
    );
    expect(breakers.checkForge('s1', s).ok).toBe(false);
    expect(events).toEqual([
      { type: 'breaker.open', breaker: 'forge_count', name: 's1', reset_at: null, reason: '2 tools forged in this session' },
    ]);
  });

  it('is not reset by time', () => {
    const { breakers, clock } = setup();
    const s = settings({ per_session_forge_count: 1 });
    breakers.checkForge('s1', s);
    clock.t += 86_400_000;
    expect(breakers.checkForge('s1', s).ok).toBe(false);
  });

  it('closes when a reload raises the limit, and opens again at the new limit', () => {
    const { breakers, events } = setup();
    breakers.checkForge('s1', settings({ per_session_forge_count: 1 }));
    expect(breakers.checkForge('s1', settings({ per_session_forge_count: 1 })).ok).toBe(false);
    expect(breakers.checkForge('s1', settings({ per_session_forge_count: 2 }))).toEqual({ ok: true, trial: false });
    expect(breakers.checkForge('s1', settings({ per_session_forge_count: 2 })).ok).toBe(false);
    expect(events).toEqual([
      { type: 'breaker.open', breaker: 'forge_count', name: 's1', reset_at: null, reason: '1 tool forged in this session' },
      { type: 'breaker.closed', breaker: 'forge_count', name: 's1' },
      { type: 'breaker.open', breaker: 'forge_count', name: 's1', reset_at: null, reason: '2 tools forged in this session' },
    ]);
  });

  it('is independent of the tools’ breakers', () => {
    const { breakers } = setup();
    const s = settings({ per_session_forge_count: 1, per_tool_rpm: 1 });
    expect(breakers.checkCall('fib', s)).toEqual({ ok: true, trial: false });
    expect(breakers.checkForge('s1', s)).toEqual({ ok: true, trial: false });
    expect(breakers.checkCall('fib', s).ok).toBe(false);
  });
});

describe('settings change in place, without resetting state', () => {
  it('a lower per_tool_rpm takes effect on the next call, keeping the tokens already spent', () => {
    const { breakers } = setup();
    breakers.checkCall('fib', settings({ per_tool_rpm: 10 }));
    breakers.checkCall('fib', settings({ per_tool_rpm: 10 }));
    const tight = settings({ per_tool_rpm: 3 });
    for (let i = 0; i < 3; i++) expect(breakers.checkCall('fib', tight)).toEqual({ ok: true, trial: false });
    expect(breakers.checkCall('fib', tight)).toMatchObject({ ok: false, retryAfterMs: 20_000 });
  });

  it('a lower per_tool_rpm does not refill an emptier bucket', () => {
    const { breakers } = setup();
    const loose = settings({ per_tool_rpm: 10 });
    for (let i = 0; i < 9; i++) breakers.checkCall('fib', loose);
    const tight = settings({ per_tool_rpm: 3 });
    expect(breakers.checkCall('fib', tight)).toEqual({ ok: true, trial: false });
    expect(breakers.checkCall('fib', tight).ok).toBe(false);
  });

  it('a higher per_tool_rpm does not refill the bucket at once, only faster', () => {
    const { breakers, clock } = setup();
    for (let i = 0; i < 3; i++) breakers.checkCall('fib', settings({ per_tool_rpm: 3 }));
    const loose = settings({ per_tool_rpm: 60 });
    expect(breakers.checkCall('fib', loose)).toMatchObject({ ok: false, retryAfterMs: 1_000 });
    clock.t += 1_000;
    expect(breakers.checkCall('fib', loose)).toEqual({ ok: true, trial: false });
  });

  it('a higher failure_threshold keeps the current failure count', () => {
    const { breakers, events } = setup();
    call(breakers, 'fib', settings(), 'failure');
    call(breakers, 'fib', settings(), 'failure');
    const lenient = settings({ failure_threshold: 5 });
    expect(breakers.state('fib', lenient)).toMatchObject({ consecutiveFailures: 2 });
    call(breakers, 'fib', lenient, 'failure');
    call(breakers, 'fib', lenient, 'failure');
    expect(breakers.state('fib', lenient)).toMatchObject({ circuit: 'closed', consecutiveFailures: 4 });
    call(breakers, 'fib', lenient, 'failure');
    expect(events).toEqual([
      { type: 'breaker.open', breaker: 'failure', name: 'fib', reset_at: iso(T0 + 10_000), reason: '5 consecutive failures' },
    ]);
  });

  it('a lower failure_threshold opens at the next failure', () => {
    const { breakers } = setup();
    for (let i = 0; i < 2; i++) call(breakers, 'fib', settings({ failure_threshold: 5 }), 'failure');
    const strict = settings({ failure_threshold: 2 });
    expect(breakers.state('fib', strict).circuit).toBe('closed');
    call(breakers, 'fib', strict, 'failure');
    expect(breakers.state('fib', strict)).toMatchObject({ circuit: 'open', consecutiveFailures: 3 });
  });

  it('a shorter cooldown lets an open breaker half-open sooner', () => {
    const { breakers, clock } = setup();
    const slow = settings({ cooldown_s: 60 });
    for (let i = 0; i < 3; i++) call(breakers, 'fib', slow, 'failure');
    clock.t += 10_000;
    expect(breakers.checkCall('fib', slow)).toMatchObject({ ok: false, retryAfterMs: 50_000 });
    const quick = settings({ cooldown_s: 5 });
    expect(breakers.state('fib', quick).circuit).toBe('half_open');
    expect(breakers.checkCall('fib', quick)).toEqual({ ok: true, trial: true });
    expect(breakers.checkCall('fib', quick)).toMatchObject({ ok: false, retryAfterMs: 5_000 });
  });

  it('a longer cooldown keeps an open breaker open longer', () => {
    const { breakers, clock } = setup();
    for (let i = 0; i < 3; i++) call(breakers, 'fib', settings({ cooldown_s: 5 }), 'failure');
    clock.t += 6_000;
    expect(breakers.checkCall('fib', settings({ cooldown_s: 30 }))).toMatchObject({ ok: false, retryAfterMs: 24_000 });
  });
});
