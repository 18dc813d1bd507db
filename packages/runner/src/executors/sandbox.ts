import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { bindAllow, bindRoots, networkFor, type PolicySnapshot, secretDelivery } from '@forge/policy';
import type { CheckedBind, SecretRule } from '@forge/sandbox';
import { readAnnotations } from '../annotations.js';
import { callAuthority } from '../authority.js';
import { cacheKey } from '../cache.js';
import type { Call } from '../call/call.js';
import type { Engine } from '../engine.js';
import type { Execution, Executor, RunJob, RunPlan } from '../executor.js';
import { RefusalError } from '../refusal.js';
import { sandboxModule } from '../sandboxModule.js';
import { readAnswer } from './sandbox/answer.js';
import { classify, type RanFacts } from './sandbox/classify.js';
import { type Forged, type InvokePorts, invokeSandbox, type RunInput, type Runtime, type Started } from './sandbox/invoke.js';
import { invalidStdoutPath, type KeepPlace, type Kept, keepInvalidStdout, keepOutputs } from './sandbox/keep.js';
import { envelopeOf, execution, forgeMeta, runManifest } from './sandbox/manifest.js';

/**
 * The sandbox executor: a forged tool's impl run in bwrap (DESIGN "Sandbox profile"), input JSON
 * on stdin, with the runtime's mounts, the schema's `x-bind` paths (hostile: checked and held by
 * descriptor), the network grant through the egress proxy, policy's limits, the events pipe; its
 * stdout parsed and capped (the whole kept as an artifact), secret values scrubbed from
 * everything it left, its output checked against the tool's output schema.
 *
 * A run is four stages, each in its own module under sandbox/: invoke (the sandbox run), keep
 * outputs (what the tool left, redacted), classify (which named rule decides the run's
 * envelope), manifest (the envelope, the manifest's and the audit entry's fields).
 */
export function sandboxExecutor(e: Engine): Executor<Forged> {
  const ports: InvokePorts = {
    code: {
      dir: e.paths.codeDir,
      made: () => e.state.codeDirMade,
      markMade: () => {
        e.state.codeDirMade = true;
      },
    },
    runSlots: e.runSlots,
    running: e.running,
    record: e.record,
    stageDir: e.options.prebuild === false ? null : (sandbox) => (e.state.stageDir ??= sandbox.makeStageDir()),
    // Warm where sandboxes are built ahead, unless turned off; an object gives the preload.
    warm: e.options.prebuild === false || e.options.warm === false ? null : typeof e.options.warm === 'object' ? e.options.warm : {},
    bwrapPath: e.options.bwrapPath,
    probeCache: join(e.paths.cacheDir, 'sandbox-probe.json'),
    resolver: e.options.resolver,
    upstreamCa: e.options.upstreamCa,
  };
  return {
    plan: (call, target, snap) => planRun(e, call, target, snap),
    run: (job) => runChecked(e.paths, ports, job),
  };
}

/** What the call needs before it runs: its runtime, secrets, budget request and cache key. */
async function planRun(e: Pick<Engine, 'runtimes' | 'cache'>, call: Call, target: Forged, snap: PolicySnapshot): Promise<RunPlan> {
  const stored = target.stored;
  let runtime: Runtime;
  try {
    runtime = await (await e.runtimes()).resolve(stored.runtime);
  } catch (err) {
    throw new RefusalError('policy_denied', (err as Error).message);
  }
  const secretNames = stored.meta?.secrets ?? [];
  const { redacted, binds } = readAnnotations(stored.input_schema, call.input);
  // Cached: deterministic tools whose answer depends on the input alone. Not with secrets
  // (their answer may depend on a secret's value) nor with bound paths (on the files' content).
  const cacheable = stored.meta?.deterministic === true && secretNames.length === 0 && binds.length === 0 && e.cache !== undefined;
  return {
    secretNames,
    redactedInput: redacted,
    budget: {
      ...(stored.meta?.timeout_ms !== undefined ? { timeout_ms: stored.meta.timeout_ms } : {}),
      ...(stored.meta?.cpu_s !== undefined ? { cpu_s: stored.meta.cpu_s } : {}),
      ...(stored.meta?.output_cap !== undefined ? { output_cap: stored.meta.output_cap } : {}),
    },
    ...(cacheable
      ? {
          cacheKey: cacheKey(stored.digest, `${runtime.name}@${runtime.version}`, call.inputDigest, callAuthority(snap, call.ctx.persona)),
        }
      : {}),
    tool: {
      name: stored.name,
      version: stored.version,
      digest: stored.digest,
      scope: stored.scope,
      runtime: `${runtime.name}@${runtime.version}`,
    },
    state: { runtime, bindRequests: binds },
  };
}

/** The run, once its `x-bind` paths are checked and held; they are closed when it ends. */
async function runChecked(
  paths: Pick<Engine['paths'], 'project' | 'home' | 'projectForge' | 'vault'>,
  ports: InvokePorts,
  job: RunJob<Forged>,
): Promise<Execution> {
  const { call, snap } = job;
  const ctx = call.ctx;
  const { checkBind, closeBinds, defaultDenyList } = await sandboxModule();
  const { runtime, bindRequests } = job.plan.state as { runtime: Runtime; bindRequests: ReturnType<typeof readAnnotations>['binds'] };
  // The network grant: closed unless policy opens it (and allow-rules agree); when open, the
  // run gets forge's egress proxy, never the host network.
  const grant = networkFor(snap, ctx.persona);
  // Binds from x-bind: hostile paths, checked and held by descriptor.
  const roots = bindRoots(snap, { project: paths.project });
  const deny = [...defaultDenyList(), paths.home, paths.projectForge, paths.vault];
  const allow = bindAllow(snap, { project: paths.project });
  const binds: CheckedBind[] = [];
  try {
    for (const b of bindRequests) {
      const c = checkBind({ path: b.path, mode: b.mode, create: b.mode === 'rw' }, { roots, deny, allow });
      if (!c.ok)
        throw new RefusalError('bind_denied', `input${b.pointer}: ${c.message} (policy bind_roots: ${roots.join(', ') || 'none'})`);
      binds.push(c.bind);
    }
    const { secretEnv, placeholders } = await delivered(snap, job.secretValues);
    const input = { runtime, input: call.input, binds, secrets: job.secrets, secretEnv, placeholders, ctx, grant };
    return await runOnce(ports, job, input);
  } finally {
    closeBinds(binds);
  }
}

/**
 * How the run gets its secrets (policy `secret_delivery`): in its environment, the value; by
 * placeholder, a new placeholder under the same name, and the rule its egress proxy substitutes by.
 */
async function delivered(
  snap: PolicySnapshot,
  values: ReadonlyMap<string, string>,
): Promise<{ secretEnv: Record<string, string>; placeholders: SecretRule[] }> {
  if (values.size === 0) return { secretEnv: {}, placeholders: [] };
  const { env, inject } = secretDelivery(snap, [...values.keys()]);
  const { newPlaceholder } = await sandboxModule();
  const placeholders = inject.map((s) => ({ ...s, placeholder: newPlaceholder(), value: values.get(s.name) as string }));
  return {
    secretEnv: Object.fromEntries([...env.map((n) => [n, values.get(n) as string]), ...placeholders.map((p) => [p.name, p.placeholder])]),
    placeholders,
  };
}

/** One sandboxed run, stage by stage: its envelope and what the manifest and the audit entry say of it. */
async function runOnce(ports: InvokePorts, job: RunJob<Forged>, r: RunInput): Promise<Execution> {
  const { runId, runDir } = job;
  const run = await invokeSandbox(ports, job, r);
  const meta = forgeMeta(runId, Boolean(job.plan.cacheKey), run.label, job.clamped);
  if (!run.ran) {
    rmSync(runDir, { recursive: true, force: true }); // nothing ran: no run to record
    const verdict = classify({ ran: false, error: run.error });
    return execution(verdict, envelopeOf(verdict, { meta, artifacts: run.artifacts, runId }));
  }
  const { result } = run;
  const place: KeepPlace = { runDir, artifacts: run.artifacts, secrets: r.secrets };
  const kept = await keepOutputs(result, place, job.budget);
  const verdict = classify(ranFacts(job, run, kept));
  if ('keepStdout' in verdict && verdict.keepStdout) keepInvalidStdout(result, place);
  const envelope = envelopeOf(verdict, { meta, artifacts: run.artifacts, runId });
  envelope.meta.duration_ms = result.durationMs;
  return execution(verdict, envelope, { result, kept, manifest: runManifest(run, kept) });
}

/** The facts {@link classify} decides a started run by. */
function ranFacts(job: RunJob<Forged>, run: Started, kept: Kept): RanFacts {
  const { result } = run;
  const { ceilings } = job.snap.policy.budgets;
  return {
    ran: true,
    cancelled: run.cancelled,
    exit: { reason: result.reason, code: result.exitCode, signal: result.signal },
    stdout: {
      truncated: result.stdoutTruncated,
      bytes: result.stdoutBytes,
      cap: result.limits.outputBytes,
      fullArtifact: kept.fullStdout,
      keptAt: invalidStdoutPath(run.artifacts),
    },
    timeoutMs: result.limits.timeoutMs,
    artifacts: {
      dir: run.artifacts,
      cap: result.limits.outputDirBytes,
      full: result.outputs?.some((o) => o.lost === undefined && o.full) ?? false,
    },
    ceilings: { output_cap: ceilings.output_cap, artifacts_bytes: ceilings.artifacts_bytes },
    stderr: kept.stderr,
    secrets: job.secrets,
    answer: readAnswer(result.stdout, job.secrets, job.target.stored),
  };
}
