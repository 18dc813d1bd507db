import type { ClampedField } from '@forge/policy';
import type { RunResult, Warmup } from '@forge/sandbox';
import { type Envelope, type EnvelopeMeta, failure } from '../../envelope.js';
import type { Execution } from '../../executor.js';
import { listArtifacts } from '../../manifest.js';
import type { Verdict } from './classify.js';
import type { Started } from './invoke.js';
import { type Kept, keptFiles } from './keep.js';

/**
 * The manifest stage of a sandboxed run: the envelope the verdict gives with forge's meta, the
 * executor's fields of the run manifest and of the audit entry.
 */

/** What forge puts in every envelope's meta of a run. */
export function forgeMeta(runId: string, cached: boolean, label: string, clamped: ClampedField[]): EnvelopeMeta {
  const meta: EnvelopeMeta = { run_id: runId, cache: cached ? 'miss' : 'off', sandbox: label };
  if (clamped.length > 0) meta.policy_clamped = clamped;
  return meta;
}

/**
 * The envelope of `verdict`: the tool's own (the files it names checked in the run's artifacts, forge's
 * meta over its own), or forge's failure.
 */
export function envelopeOf(verdict: Verdict, run: { meta: EnvelopeMeta; artifacts: string; runId: string }): Envelope {
  const { meta } = run;
  if (!('answer' in verdict)) return failure(verdict.error.kind, verdict.error.message, { ...meta, ...verdict.meta }, verdict.error.extra);
  const e = verdict.answer;
  const own = keptFiles(e.meta, run.artifacts, run.runId);
  return e.ok ? { ok: true, data: e.data, meta: { ...own, ...meta } } : { ok: false, error: e.error, meta: { ...own, ...meta } };
}

/** What a warm sandbox's warm-up cost, for the manifest (not counted against the run's limits). */
function warmupFacts(w: Warmup): Record<string, number> {
  return {
    ms: w.ms,
    ...(w.cpuMs !== undefined ? { cpu_ms: w.cpuMs } : {}),
    ...(w.memoryBytes !== undefined ? { memory_bytes: w.memoryBytes } : {}),
  };
}

/** The executor's fields of the run manifest for a run the sandbox started. */
export function runManifest(run: Started, kept: Kept): Record<string, unknown> {
  const { result } = run;
  return {
    sandbox: {
      label: run.label,
      prebuilt: result.prebuilt,
      // cold: a sandbox built for the run; built: one built ahead; warm: its interpreter was running too.
      mode: result.warmup ? 'warm' : result.prebuilt ? 'built' : 'cold',
      ...(result.warmup ? { warmup: warmupFacts(result.warmup) } : {}),
      // Who the tool ran as on the host, and how each limit held: for the whole run (cgroup)
      // or per process only (rlimit).
      host_uid: result.hostUid,
      enforced: result.enforced,
      argv: run.command,
      mounts: run.mounts.map((m) => `${m.mode}:${m.target ?? m.source}`),
      binds: run.binds.map((b) => `${b.mode}:${b.path}`),
    },
    exit: { reason: result.reason, code: result.exitCode, signal: result.signal },
    stdout_bytes: result.stdoutBytes,
    ...(result.network ? { network: result.network } : {}),
    artifacts: listArtifacts(run.artifacts),
    ...(result.usage ? { usage: { cpu_ms: result.usage.cpuMs } } : {}),
    ...(result.outputs?.[0] ? { artifacts_copy: outputFacts(result.outputs[0]) } : {}),
    ...(kept.scrubbed ? { redaction: kept.scrubbed } : {}),
    stderr_tail: kept.stderr,
    events: run.events,
  };
}

/** What one run gave the pipeline: its envelope and outcome, the manifest's and the audit entry's fields. */
export function execution(
  verdict: Verdict,
  envelope: Envelope,
  ran?: { result: RunResult; kept: Kept; manifest: Record<string, unknown> },
): Execution {
  const scrubbed = ran?.kept.scrubbed;
  const redacted = scrubbed ? scrubbed.files.length + scrubbed.renamed.length + scrubbed.removed.length : 0;
  return {
    envelope,
    outcome: verdict.outcome,
    ran: ran !== undefined,
    ...(ran ? { durationMs: ran.result.durationMs } : {}),
    manifest: ran?.manifest ?? {},
    audit: {
      ...(ran ? { exit: ran.result.reason, duration_ms: ran.result.durationMs } : {}),
      ...(ran?.result.network ? { network: ran.result.network } : {}),
      ...(redacted > 0 ? { artifacts_redacted: redacted } : {}),
    },
  };
}

/** What the sandbox copied out of the run's artifacts directory, for the manifest. */
function outputFacts(o: NonNullable<RunResult['outputs']>[number]): Record<string, unknown> {
  if (o.lost !== undefined) return { lost: o.lost };
  return {
    files: o.files,
    directories: o.directories,
    symlinks: o.symlinks,
    bytes: o.bytes,
    skipped: o.skipped,
    truncated: o.truncated,
    full: o.full,
  };
}
