import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { bindAllow, bindRoots, networkFor, type PolicySnapshot } from '@forge/policy';
import type { StoredTool } from '@forge/registry';
import { toolValidators } from '@forge/registry';
import {
  type CheckedBind,
  checkBind,
  closeBinds,
  defaultDenyList,
  EVENTS_FD,
  type Mount,
  makeStageDir,
  type NetworkEvent,
  type RunResult,
  type RuntimeTable,
  runSandboxed,
} from '@forge/sandbox';
import { readAnnotations } from '../annotations.js';
import type { Refusal } from '../api.js';
import { callAuthority } from '../authority.js';
import { cacheKey } from '../cache.js';
import type { Target } from '../call/resolve.js';
import type { Ctx, Engine } from '../engine.js';
import { type Envelope, type EnvelopeMeta, failure, parseToolOutput } from '../envelope.js';
import { EventReader, type EventSummary } from '../events.js';
import type { Execution, Executor, RunJob } from '../executor.js';
import { listArtifacts } from '../manifest.js';
import { checkMetaFiles } from '../metaFiles.js';
import {
  excerpt,
  redactBytes,
  redactCutEnd,
  redactFileInPlace,
  redactTail,
  redactText,
  redactTextFolded,
  redactValue,
  redactWithFragments,
  type SecretList,
} from '../redact.js';
import { RefusalError, stopReason } from '../refusal.js';
import { type ScrubReport, scrubArtifacts } from '../scrub.js';

/**
 * The sandbox executor: a forged tool's impl run in bwrap (DESIGN "Sandbox profile"), input JSON
 * on stdin, with the runtime's mounts, the schema's `x-bind` paths (hostile: checked and held by
 * descriptor), the network grant through the egress proxy, policy's limits, the events pipe; its
 * stdout parsed and capped (the whole kept as an artifact), secret values scrubbed from
 * everything it left, its output checked against the tool's output schema.
 */

type Forged = Extract<Target, { kind: 'forged' }>;
type Runtime = ReturnType<RuntimeTable['get']>;

const EXTENSIONS: Record<string, string> = { python: 'py', node: 'js', bash: 'sh', sh: 'sh' };

interface RunInput {
  runtime: Runtime;
  input: unknown;
  binds: CheckedBind[];
  secrets: SecretList;
  secretEnv: Record<string, string>;
  snap: PolicySnapshot;
  ctx: Ctx;
  key: string | undefined;
  grant: ReturnType<typeof networkFor>;
}

export function sandboxExecutor(e: Engine): Executor<Forged> {
  const { options, paths } = e;

  const plan: Executor<Forged>['plan'] = async (call, target, snap) => {
    const stored = target.stored;
    let runtime: Runtime;
    try {
      runtime = await (await e.runtimesReady).resolve(stored.runtime);
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
            cacheKey: cacheKey(
              stored.digest,
              `${runtime.name}@${runtime.version}`,
              call.inputDigest,
              callAuthority(snap, call.ctx.persona),
            ),
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
  };

  const run: Executor<Forged>['run'] = async (job) => {
    const { call, snap } = job;
    const ctx = call.ctx;
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
      return await runOnce(job, {
        runtime,
        input: call.input,
        binds,
        secrets: job.secrets,
        secretEnv: Object.fromEntries(job.secretValues),
        snap,
        ctx,
        key: job.plan.cacheKey,
        grant,
      });
    } finally {
      closeBinds(binds);
    }
  };

  /** One sandboxed run: its envelope and what the manifest and the audit entry say of it. */
  const runOnce = async (job: RunJob<Forged>, r: RunInput): Promise<Execution> => {
    const stored = job.target.stored;
    const { runtime, snap, ctx } = r;
    const { runId, runDir } = job;
    const artifacts = join(runDir, 'artifacts');
    mkdirSync(artifacts, { recursive: true, mode: 0o700 });
    const family = runtime.name.startsWith('python') ? 'python' : runtime.name;
    const ext = EXTENSIONS[family] ?? 'txt';
    const code = codeFile(e, stored, ext);
    const target = `/forge/tool/main.${ext}`;
    const { budget, clamped } = job;
    const command = family === 'python' ? [runtime.interpreter, '-I', '-B', target] : [runtime.interpreter, target];
    const mounts: Mount[] = [
      ...runtime.mounts.map((source) => ({ source, mode: 'ro' as const })),
      { source: code, target, mode: 'ro', perRun: true },
      { source: artifacts, target: '/forge/artifacts', mode: 'rw', perRun: true },
    ];
    const spill = join(runDir, 'stdout.partial');
    const net = r.grant.network === 'allow';
    const sandboxLabel = net ? (r.grant.loopback === 'allow' ? 'bwrap+net+loopback' : 'bwrap+net') : 'bwrap';
    const ac = new AbortController();
    e.running.add(ac);
    const onAbort = () => ac.abort(ctx.signal?.reason);
    ctx.signal?.addEventListener('abort', onAbort);
    if (ctx.signal?.aborted) ac.abort(ctx.signal.reason);
    let result: RunResult | undefined;
    let sandboxError: Refusal | undefined;
    let manifest: Record<string, unknown> | undefined;
    // The tool's events (descriptor 3): handed to the caller as they come, summed up in the manifest.
    const events = new EventReader({ secrets: r.secrets, ...(ctx.onEvent ? { onEvent: ctx.onEvent } : {}) });
    let eventSummary: EventSummary | undefined;
    // A free slot first (runSlots.ts): past the bound, runs wait here in order.
    const releaseSlot = await e.runSlots.take(ac.signal);
    try {
      result = await runSandboxed(
        {
          command,
          env: {
            ...runtime.env,
            FORGE_ARTIFACTS: '/forge/artifacts',
            FORGE_RUN_ID: runId,
            FORGE_EVENTS_FD: String(EVENTS_FD),
            ...r.secretEnv,
          },
          mounts,
          binds: r.binds,
          limits: {
            timeoutMs: budget.timeout_ms,
            cpuSeconds: budget.cpu_s,
            outputBytes: budget.output_cap,
            outputDirBytes: budget.artifacts_bytes,
          },
          cwd: '/tmp',
          ...(net
            ? {
                network: {
                  grant: {
                    network: 'allow' as const,
                    loopback: r.grant.loopback,
                    private_networks: r.grant.private_networks,
                    allow_domains: r.grant.allow_domains,
                    deny_domains: r.grant.deny_domains,
                    allow_ports: r.grant.allow_ports,
                  },
                  // Every decision of the proxy is audited, with the run it belongs to.
                  // Host names reach the proxy case-folded: a secret in one is matched in any case.
                  onEvent: (ev: NetworkEvent) =>
                    void e.record(
                      ev.type,
                      { ...foldRedacted(ev, r.secrets), run_id: runId, name: stored.name, persona: ctx.persona },
                      r.secrets,
                    ),
                  ...(options.resolver ? { resolver: options.resolver } : {}),
                },
              }
            : {}),
        },
        {
          stdin: JSON.stringify(r.input ?? {}),
          stdoutFile: spill,
          signal: ac.signal,
          events: (chunk) => events.push(chunk),
          ...(options.prebuild === false ? {} : { prebuild: { stageDir: (e.state.stageDir ??= makeStageDir()) } }),
          ...(options.bwrapPath ? { bwrapPath: options.bwrapPath } : {}),
        },
      );
    } catch (err) {
      const code = (err as { code?: string }).code;
      // The sandbox's message may quote the end of stderr, cut before forge could redact it.
      const message = redactWithFragments((err as Error).message, r.secrets);
      sandboxError = {
        ok: false,
        kind: code === 'sandbox_unavailable' ? 'sandbox_unavailable' : code === 'bind_denied' ? 'bind_denied' : 'internal',
        message,
      };
      if (code === 'sandbox_unavailable') await e.record('sandbox.unavailable', { name: stored.name, message }, r.secrets);
    } finally {
      releaseSlot();
      e.running.delete(ac);
      ctx.signal?.removeEventListener('abort', onAbort);
      eventSummary = events.end();
    }

    const meta: EnvelopeMeta = { run_id: runId, cache: r.key ? 'miss' : 'off', sandbox: sandboxLabel };
    if (clamped.length > 0) meta.policy_clamped = clamped;
    let envelope: Envelope;
    // The outcome for the tool's breaker: a failure when forge found the tool broken (crash,
    // limit, bad output). A tool's own ok:false is an answer; a host that cannot sandbox, or a
    // call cancelled from outside, is not the tool's doing.
    let outcome: Execution['outcome'] = 'success';
    const secrets = r.secrets;
    const clean = (text: string) => redactText(text, secrets);
    /** Secret values written into artifact files, replaced on disk after the run. */
    let scrubbed: ScrubReport | undefined;
    if (!result) {
      envelope = failure(sandboxError?.kind ?? 'internal', sandboxError?.message ?? 'the sandbox did not run', meta);
      outcome = sandboxError?.kind === 'internal' ? 'failure' : 'none';
      rmSync(runDir, { recursive: true, force: true }); // nothing ran: no run to record
    } else {
      // What the tool wrote among its artifacts, searched before forge adds its own files there.
      if (secrets.length > 0) scrubbed = await scrubOrClear(artifacts, secrets, scrubLimits(budget));
      // Killed by forge (a limit, a timeout, a cancel): stdout may end in the middle of a secret.
      const killed = result.reason !== 'exit';
      if (result.stdoutFile) {
        // The whole stdout, moved among the artifacts only now (the tool cannot have placed
        // anything there under that name), with secret values removed first.
        const full = join(artifacts, 'full_stdout.bin');
        if (secrets.length > 0) redactFileInPlace(result.stdoutFile, secrets, { cutEnd: killed });
        rmSync(full, { recursive: true, force: true });
        renameSync(result.stdoutFile, full);
      }
      // The sandbox keeps only the last bytes of stderr: a secret may straddle where it cut.
      const stderr = redactTail(result.stderrTail, secrets, Buffer.byteLength(result.stderrTail) >= result.limits.stderrTailBytes);
      if (ac.signal.aborted && result.reason === 'signal') {
        outcome = 'none';
        envelope = failure('cancelled', `${stopReason(ac.signal)}; the tool was killed`, meta);
      } else if (result.stdoutTruncated) {
        outcome = 'failure';
        meta.stdout_truncated = true;
        meta.stdout_truncated_at_bytes = result.limits.outputBytes;
        meta.stdout_total_bytes = result.stdoutBytes;
        if (result.stdoutFile) meta.stdout_full_artifact = join(artifacts, 'full_stdout.bin');
        envelope = failure(
          'resource_limit',
          `the tool printed ${result.stdoutBytes} bytes, over its output cap of ${result.limits.outputBytes}; the whole output is kept in ${meta.stdout_full_artifact ?? 'no file'} — print less, or raise meta.output_cap (policy ceiling ${snap.policy.budgets.ceilings.output_cap})`,
          meta,
        );
      } else if (result.reason === 'timeout') {
        outcome = 'failure';
        envelope = failure(
          'timeout',
          `the tool ran past its ${result.limits.timeoutMs} ms wall-clock limit and was killed${tail(stderr, secrets)}`,
          meta,
        );
      } else if (result.reason === 'cpu' || result.reason === 'memory' || result.reason === 'file_size' || result.reason === 'output_cap') {
        outcome = 'failure';
        envelope = failure('resource_limit', `the tool hit its ${result.reason} limit${tail(stderr, secrets)}`, meta, {
          limit: result.reason,
        });
      } else if (result.outputs?.some((o) => o.lost === undefined && o.full)) {
        outcome = 'failure';
        envelope = failure(
          'resource_limit',
          `the tool filled its artifacts directory (${result.limits.outputDirBytes} bytes, policy budget artifacts_bytes); what it wrote up to that is kept in ${artifacts} — write less, or raise budgets.defaults.artifacts_bytes (ceiling ${snap.policy.budgets.ceilings.artifacts_bytes})${tail(stderr, secrets)}`,
          meta,
          { limit: 'artifacts_bytes' },
        );
      } else {
        const parsed = parseToolOutput(result.stdout, secrets);
        if (!parsed.ok) {
          outcome = 'failure';
          // Kept beside the artifacts, then renamed in (the tool could have left a symlink there).
          const kept = join(artifacts, 'stdout.bin');
          writeFileSync(join(runDir, 'stdout.bin'), killed ? redactCutEnd(result.stdout, secrets) : redactBytes(result.stdout, secrets), {
            mode: 0o600,
            flag: 'wx',
          });
          rmSync(kept, { recursive: true, force: true });
          renameSync(join(runDir, 'stdout.bin'), kept);
          const exit = result.reason === 'signal' ? `was killed by ${result.signal}` : `exited with code ${result.exitCode}`;
          envelope = failure(
            'output_invalid',
            clean(`${parsed.reason}; the tool ${exit}; its stdout is kept in ${kept}${tail(stderr, secrets)}`),
            meta,
          );
        } else {
          const e = parsed.envelope;
          // The tool's own meta, without the fields only forge may set.
          const toolMeta = redactValue(withoutKeys(e.meta, FORGE_META_KEYS), secrets) as EnvelopeMeta;
          // The files it names, as found on disk now (metaFiles.ts), never as the tool says.
          if (toolMeta.files !== undefined) {
            const checked = checkMetaFiles(artifacts, runId, toolMeta.files);
            toolMeta.files = checked.files;
            if (checked.dropped.length > 0) toolMeta.files_dropped = checked.dropped;
          }
          envelope = e.ok
            ? { ok: true, data: redactValue(e.data, secrets), meta: { ...toolMeta, ...meta } }
            : { ok: false, error: redactValue(e.error, secrets) as typeof e.error, meta: { ...toolMeta, ...meta } };
          if (envelope.ok && stored.output_schema) {
            const validators = toolValidators(stored);
            const out = 'kind' in validators ? undefined : validators.output?.(envelope.data);
            if (out && !out.ok) {
              outcome = 'failure';
              envelope = failure('output_schema_failed', out.message, meta, { problems: out.problems });
            }
          }
        }
      }
      envelope.meta.duration_ms = result.durationMs;
      manifest = {
        sandbox: {
          label: sandboxLabel,
          prebuilt: result.prebuilt,
          // Who the tool ran as on the host, and how each limit held: for the whole run (cgroup)
          // or per process only (rlimit).
          host_uid: result.hostUid,
          enforced: result.enforced,
          argv: command,
          mounts: mounts.map((m) => `${m.mode}:${m.target ?? m.source}`),
          binds: r.binds.map((b) => `${b.mode}:${b.path}`),
        },
        exit: { reason: result.reason, code: result.exitCode, signal: result.signal },
        stdout_bytes: result.stdoutBytes,
        ...(result.network ? { network: result.network } : {}),
        artifacts: listArtifacts(artifacts),
        ...(result.usage ? { usage: { cpu_ms: result.usage.cpuMs } } : {}),
        ...(result.outputs?.[0] ? { artifacts_copy: outputFacts(result.outputs[0]) } : {}),
        ...(scrubbed ? { redaction: scrubbed } : {}),
        stderr_tail: stderr,
        events: eventSummary,
      };
    }
    return {
      envelope,
      outcome,
      ran: result !== undefined,
      ...(result ? { durationMs: result.durationMs } : {}),
      manifest: manifest ?? {},
      audit: {
        ...(result ? { exit: result.reason, duration_ms: result.durationMs } : {}),
        ...(result?.network ? { network: result.network } : {}),
        ...(scrubbed && scrubbed.files.length + scrubbed.renamed.length + scrubbed.removed.length > 0
          ? { artifacts_redacted: scrubbed.files.length + scrubbed.renamed.length + scrubbed.removed.length }
          : {}),
      },
    };
  };

  return { plan, run };
}

/** The tool's impl as a file named by its digest (rewritten if it was changed on disk). */
function codeFile(e: Engine, tool: StoredTool, ext: string): string {
  const file = join(e.paths.codeDir, `${tool.digest.replace(/^sha256:/, '')}.${ext}`);
  if (!e.state.codeDirMade) {
    mkdirSync(e.paths.codeDir, { recursive: true, mode: 0o700 });
    e.state.codeDirMade = true;
  }
  let current: string | undefined;
  try {
    current = readFileSync(file, 'utf8');
  } catch {
    current = undefined;
  }
  if (current !== tool.impl) {
    const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
    writeFileSync(tmp, tool.impl, { mode: 0o400, flag: 'wx' });
    renameSync(tmp, file);
  }
  return file;
}

/** A flat event with its string fields passed through {@link redactTextFolded}. */
function foldRedacted(e: object, secrets: SecretList): Record<string, unknown> {
  if (secrets.length === 0) return { ...e };
  return Object.fromEntries(Object.entries(e).map(([k, v]) => [k, typeof v === 'string' ? redactTextFolded(v, secrets) : v]));
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

/** The end of a (redacted) stderr tail for a message, cut only after redacting. */
function tail(stderr: string, secrets: SecretList): string {
  const t = stderr.trim();
  return t ? `; stderr ends: ${excerpt(t, secrets, 600, 'end')}` : '';
}

/** Bytes and entries of a run's artifacts searched for secret values (the artifacts budget when policy sets one). */
function scrubLimits(budget: object): { maxBytes: number; maxEntries: number } {
  const cap = (budget as { artifacts_bytes?: unknown }).artifacts_bytes;
  return { maxBytes: typeof cap === 'number' && cap > 0 ? cap : DEFAULT_SCRUB_BYTES, maxEntries: 100_000 };
}
const DEFAULT_SCRUB_BYTES = 1 << 30;

/** {@link scrubArtifacts}, failing closed: artifacts that cannot be searched are all removed. */
async function scrubOrClear(dir: string, secrets: SecretList, limits: ReturnType<typeof scrubLimits>): Promise<ScrubReport> {
  try {
    return await scrubArtifacts(dir, secrets, limits);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { mode: 0o700 });
    const why = redactText((err as Error).message, secrets);
    return {
      files: [],
      renamed: [],
      removed: [{ path: '.', reason: `could not be searched for secret values: ${why}` }],
      scanned_bytes: 0,
    };
  }
}

/** Fields of an envelope's meta that only forge sets: a tool's own values for them are dropped. */
const FORGE_META_KEYS = [
  'run_id',
  'duration_ms',
  'cache',
  'sandbox',
  'seed_run',
  'stdout_truncated',
  'stdout_truncated_at_bytes',
  'stdout_total_bytes',
  'stdout_full_artifact',
  'policy_clamped',
  'files_dropped',
];

function withoutKeys(o: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (!keys.includes(k)) out[k] = v;
  return out;
}
