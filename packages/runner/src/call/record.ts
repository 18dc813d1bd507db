import { auditSafe, outputDigest } from '../auditData.js';
import { AUDIT_UNAVAILABLE } from '../auditGate.js';
import type { Caller } from '../caller.js';
import { type Envelope, failure } from '../envelope.js';
import type { Execution, RunJob } from '../executor.js';
import type { PostDecisions } from '../hooks/apply.js';
import type { AuditPort, CachePort, RunsPort } from '../ports.js';
import { redactValue } from '../redact.js';
import type { Target } from './resolve.js';

/** What one run gave the pipeline: the envelope, the run id, and the outcome for the tool's breaker. */
export interface RunOutcome {
  envelope: Envelope;
  runId: string;
  outcome: 'success' | 'failure' | 'none';
  /** False when nothing ran (the host could not sandbox, the upstream never answered). */
  ran: boolean;
  /**
   * The answer this call's caller gets, when its post hooks ran before the record (recordRun's
   * `post`); `envelope` stays the tool's own answer (what is cached, and what a call sharing
   * this run gets before its own post hooks).
   */
  answered?: Envelope;
}

/** The ports the record step writes to: the log, the run store and call counts, the cache. */
export type RecordPorts = Pick<AuditPort, 'record'> & RunsPort & CachePort;

/** What every call entry (`forge.called`, `gateway.called`) says of the tool, the caller and the input. */
export function calledFacts(target: Target, caller: Caller, inputDigest: string): Record<string, unknown> {
  const who = { ...caller, input_digest: inputDigest };
  if (target.kind === 'forged') {
    const s = target.stored;
    return { name: s.name, version: s.version, digest: s.digest, scope: s.scope, ...who };
  }
  const t = target.tool;
  return { name: t.name, digest: t.digest, server: t.origin.server, upstream_tool: t.origin.tool, ...who };
}

/**
 * Step 5, record: the run manifest and the call's audit entry (written together: the manifest
 * while the entry's durable append is under way), `tool.secrets_injected` when the run got
 * secrets, then the cache store. Answered only once audited: an entry the log cannot take
 * withholds the answer (`audit_unavailable`) and the manifest says why; only an audited answer
 * is cached, and its entry records the cache key and the answer's digest (`output_digest`), so a
 * later hit names a seed run the log shows and serves only the answer the log recorded.
 */
export async function recordRun(e: RecordPorts, job: RunJob, exec: Execution, post?: PostDecisions): Promise<RunOutcome> {
  const { call, target, plan, secrets, runId, runDir } = job;
  const { envelope } = exec;
  const cache = envelope.meta.cache ?? 'off';
  const manifest = exec.ran
    ? {
        run_id: runId,
        tool: plan.tool,
        ...call.caller,
        input: redactValue(plan.redactedInput, secrets),
        input_digest: call.inputDigest,
        limits: { ...job.budget, clamped: job.clamped },
        secrets: plan.secretNames,
        policy: job.snap.digest,
        started_at: new Date(job.startedAt).toISOString(),
        ...(exec.durationMs !== undefined ? { duration_ms: exec.durationMs } : {}),
        cache,
        ok: envelope.ok,
        ...(envelope.ok ? {} : { error_kind: envelope.error.kind }),
        ...exec.manifest,
      }
    : undefined;
  // A cacheable answer's entry names its key and digest: the cache serves it only as recorded (cache.ts).
  const answered = envelope.ok && plan.cacheKey ? { cache_key: plan.cacheKey, output_digest: outputDigest(envelope) } : undefined;
  // A trial run of a proposal is not a call of the tool (forge_list counts calls).
  if (target.kind !== 'forged' || target.stored.state === 'active') e.calls.set(call.name, (e.calls.get(call.name) ?? 0) + 1);
  const calledData: Record<string, unknown> = {
    ok: envelope.ok,
    ...calledFacts(target, call.caller, call.inputDigest),
    run_id: exec.ran ? runId : null,
    cache,
    ...answered,
    ...(envelope.ok ? {} : { kind: envelope.error.kind }),
    ...exec.audit,
    ...(plan.secretNames.length > 0 ? { secrets: plan.secretNames } : {}),
    ...(job.clamped.length > 0 ? { policy_clamped: job.clamped } : {}),
    policy: job.snap.digest,
    ...(call.dispatched ? { call_id: call.dispatched.callId } : {}),
  };
  const injected =
    plan.secretNames.length > 0 && exec.ran
      ? {
          name: call.name,
          run_id: runId,
          secrets: plan.secretNames,
          persona: call.caller.persona,
          ...(call.dispatched ? { call_id: call.dispatched.callId } : {}),
        }
      : undefined;
  if (call.dispatched) {
    const entries = [{ type: call.eventType, data: auditSafe(calledData, secrets) as Record<string, unknown> }];
    if (injected) entries.push({ type: 'tool.secrets_injected', data: injected });
    await call.dispatched.beforeRecord(entries, envelope, exec.outcome);
  }
  const recorded = e.record(call.eventType, calledData, secrets);
  // The post hooks' decisions, appended right behind the call's entry: one durable write for both.
  const posted = post?.record();
  const [unrecorded] = await Promise.all([
    recorded,
    // Redacted whole (artifact names, network hosts a tool chose), never cut before that.
    manifest && e.runs.writeManifest(runId, redactValue(manifest, secrets) as Record<string, unknown>, { runDir }),
  ]);
  const unrecordedSecrets = !unrecorded && injected ? await e.record('tool.secrets_injected', injected) : undefined;
  const lost = unrecorded ?? unrecordedSecrets;
  if (lost) {
    // Answered only once audited: the tool's answer is withheld, and the run says why.
    if (manifest) {
      const audit_append = {
        ok: false,
        entry: unrecorded ? call.eventType : 'tool.secrets_injected',
        errno: lost.errno,
        at: lost.at,
        message: lost.message,
      };
      await e.runs.writeManifest(
        runId,
        redactValue({ ...manifest, answered: AUDIT_UNAVAILABLE, audit_append }, secrets) as Record<string, unknown>,
        { runDir },
      );
    }
    await posted;
    const withheld = failure(AUDIT_UNAVAILABLE, lost.message, envelope.meta);
    return { envelope: withheld, runId, outcome: exec.outcome, ran: exec.ran, ...(posted ? { answered: withheld } : {}) };
  }
  // A worker's answer is cached by the front-end that asked (dispatch.ts), where the calls look.
  if (answered && e.cache && !call.dispatched) await e.cache.set(answered.cache_key, envelope, runId, answered);
  return { envelope, runId, outcome: exec.outcome, ran: exec.ran, ...(posted ? { answered: await posted } : {}) };
}
