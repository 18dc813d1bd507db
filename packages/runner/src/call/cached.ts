import type { PolicySnapshot } from '@forge/policy';
import { outputDigest } from '../auditData.js';
import { AUDIT_UNAVAILABLE } from '../auditGate.js';
import { type CacheMismatch, type CacheStore, mismatchMessage } from '../cache.js';
import { type Envelope, failure } from '../envelope.js';
import type { RunPlan } from '../executor.js';
import { newId } from '../manifest.js';
import { rebaseFiles } from '../metaFiles.js';
import type { AuditPort, CachePort, Clock, Lifecycle, RunsPort } from '../ports.js';
import type { Call } from './call.js';
import { calledFacts, type RunOutcome } from './record.js';
import type { Target } from './resolve.js';

/**
 * The cache rules, the same for every executor: a tool whose plan gave a cache key (deterministic,
 * no secrets, no binds) is answered from the cache when it holds the key and the audit log backs
 * the entry (its seed run's entry recorded this key and this answer's digest), and calls of the
 * same key in flight at once share one run (single flight). An entry the log does not back is
 * removed, reported (`forge.cache_mismatch` and a warning) and the call runs. Every answer, a hit
 * or a shared one, has its own run id, record and audit entry; a failed shared run is recorded
 * for each caller.
 */
/** The ports of the cache rules: the cache, the log it is checked against, the run store. */
export type CachePorts = Pick<AuditPort, 'record' | 'track' | 'audit' | 'ownsAudit'> &
  CachePort &
  RunsPort &
  Clock &
  Pick<Lifecycle, 'state'>;

export async function cachedOrRun(
  e: CachePorts,
  call: Call,
  target: Target,
  plan: RunPlan & { cacheKey: string },
  snap: PolicySnapshot,
  runOnce: () => Promise<RunOutcome>,
): Promise<RunOutcome | { envelope: Envelope; outcome: 'success' | 'failure' | 'none' }> {
  const cache = e.cache;
  if (!cache) return runOnce();
  const key = plan.cacheKey;
  const found = await cache.lookup(key, { log: e.audit, file: e.ownsAudit ? e.audit.path : undefined });
  if (found && 'entry' in found)
    return { envelope: await cacheHit(e, call, target, plan, snap, found.entry.envelope, found.entry.seed_run, false), outcome: 'success' };
  if (found) await reportMismatch(e, call, target, found.mismatch, cache.store);
  const flight = cache.once(key, runOnce);
  const r = await flight.result;
  if (!flight.shared) return r;
  // Another caller ran it: its answer, recorded for this call too.
  if (r.envelope.ok) return { envelope: await cacheHit(e, call, target, plan, snap, r.envelope, r.runId, true), outcome: r.outcome };
  const unrecorded = await e.record(call.eventType, {
    ok: false,
    ...calledFacts(target, call.caller, call.inputDigest),
    kind: r.envelope.error.kind,
    cache: 'miss',
    shared_flight: true,
    seed_run: r.runId,
    policy: snap.digest,
  });
  if (unrecorded) return { envelope: failure(AUDIT_UNAVAILABLE, unrecorded.message, r.envelope.meta), outcome: r.outcome };
  return { envelope: r.envelope, outcome: r.outcome };
}

/** A cache hit: the seed run's envelope with this call's meta, its own record and audit entry. */
async function cacheHit(
  e: CachePorts,
  call: Call,
  target: Target,
  plan: RunPlan & { cacheKey: string },
  snap: PolicySnapshot,
  seed: Envelope,
  seedRun: string,
  /** Another caller's run, awaited together (single flight), rather than a stored entry. */
  shared: boolean,
): Promise<Envelope> {
  const runId = newId(new Date(e.now()));
  const envelope: Envelope = {
    ...seed,
    meta: { ...seed.meta, run_id: runId, cache: 'hit', duration_ms: e.now() - call.started, seed_run: seedRun },
  };
  // The seed's files, read through this hit's id (the hit's persona may read them; runs.ts).
  if (seed.meta.files !== undefined) envelope.meta.files = rebaseFiles(seed.meta.files, runId);
  const { runtime: _runtime, ...tool } = plan.tool;
  // A hit runs nothing: its record goes to runs/hits.jsonl, batched (close() waits for it).
  e.state.hitsWritten = e.track(
    e.runs.appendHit({
      run_id: runId,
      at: new Date(e.now()).toISOString(),
      tool,
      ...call.caller,
      input: plan.redactedInput,
      cache: 'hit',
      cache_key: plan.cacheKey,
      seed_run: seedRun,
      shared_flight: shared,
      policy: snap.digest,
      ok: true,
    }),
  );
  e.calls.set(call.name, (e.calls.get(call.name) ?? 0) + 1);
  const unrecorded = await e.record(call.eventType, {
    ok: true,
    ...calledFacts(target, call.caller, call.inputDigest),
    run_id: runId,
    seed_run: seedRun,
    cache: 'hit',
    ...(shared ? { shared_flight: true } : {}),
    // A worker's answer is cached by the front-end that asked, which serves it only as recorded.
    ...(call.dispatched ? { cache_key: plan.cacheKey, output_digest: outputDigest(envelope) } : {}),
    policy: snap.digest,
  });
  if (unrecorded) return failure(AUDIT_UNAVAILABLE, unrecorded.message, envelope.meta);
  return envelope;
}

/**
 * A stored answer the audit log does not back: a warning and `forge.cache_mismatch` (the tool, the
 * caller, the key, the seed run, what differed), before the call runs as a miss. Not withheld
 * for: the call's own entry comes next, and the log's gate refuses the call if this one failed.
 */
async function reportMismatch(
  e: Pick<AuditPort, 'record'>,
  call: Call,
  target: Target,
  m: CacheMismatch,
  store: CacheStore,
): Promise<void> {
  process.emitWarning(`forge: ${mismatchMessage(m, call.name, store)}`);
  await e.record('forge.cache_mismatch', {
    ...calledFacts(target, call.caller, call.inputDigest),
    cache_key: m.key,
    seed_run: m.seed_run,
    reason: m.reason,
    output_digest: m.output_digest,
    recorded: m.recorded ?? null,
    store: store.kind,
  });
}
