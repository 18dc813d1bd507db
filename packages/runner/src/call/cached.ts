import type { PolicySnapshot } from '@forge/policy';
import { AUDIT_UNAVAILABLE } from '../auditGate.js';
import type { Engine } from '../engine.js';
import { type Envelope, failure } from '../envelope.js';
import type { RunPlan } from '../executor.js';
import { newId } from '../manifest.js';
import { rebaseFiles } from '../metaFiles.js';
import type { Call } from './call.js';
import { calledFacts, type RunOutcome } from './record.js';
import type { Target } from './resolve.js';

/**
 * The cache rules, the same for every executor: a tool whose plan gave a cache key (deterministic,
 * no secrets, no binds) is answered from the cache when it holds the key, and calls of the same
 * key in flight at once share one run (single flight). Every answer, a hit or a shared one, has
 * its own run id, record and audit entry; a failed shared run is recorded for each caller.
 */
export async function cachedOrRun(
  e: Engine,
  call: Call,
  target: Target,
  plan: RunPlan & { cacheKey: string },
  snap: PolicySnapshot,
  runOnce: () => Promise<RunOutcome>,
): Promise<RunOutcome | { envelope: Envelope; outcome: 'success' | 'failure' | 'none' }> {
  const cache = e.cache;
  if (!cache) return runOnce();
  const key = plan.cacheKey;
  const hit = await cache.get(key);
  if (hit) return { envelope: await cacheHit(e, call, target, plan, snap, hit.envelope, hit.seed_run, false), outcome: 'success' };
  const flight = cache.once(key, runOnce);
  const r = await flight.result;
  if (!flight.shared) return r;
  // Another caller ran it: its answer, recorded for this call too.
  if (r.envelope.ok) return { envelope: await cacheHit(e, call, target, plan, snap, r.envelope, r.runId, true), outcome: r.outcome };
  const unrecorded = await e.record(call.eventType, {
    ok: false,
    ...calledFacts(target, call.ctx, call.inputDigest),
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
  e: Engine,
  call: Call,
  target: Target,
  plan: RunPlan & { cacheKey: string },
  snap: PolicySnapshot,
  seed: Envelope,
  seedRun: string,
  /** Another caller's run, awaited together (single flight), rather than a stored entry. */
  shared: boolean,
): Promise<Envelope> {
  const { ctx } = call;
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
      persona: ctx.persona,
      session: ctx.session,
      ...(ctx.task ? { task: ctx.task } : {}),
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
    ...calledFacts(target, ctx, call.inputDigest),
    run_id: runId,
    seed_run: seedRun,
    cache: 'hit',
    ...(shared ? { shared_flight: true } : {}),
    policy: snap.digest,
  });
  if (unrecorded) return failure(AUDIT_UNAVAILABLE, unrecorded.message, envelope.meta);
  return envelope;
}
