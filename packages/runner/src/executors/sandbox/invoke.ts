import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { networkFor } from '@forge/policy';
import type { StoredTool } from '@forge/registry';
import type {
  CheckedBind,
  Mount,
  NetworkEvent,
  Resolver,
  RunOptions,
  RunResult,
  RuntimeTable,
  SandboxProfile,
  SecretRule,
  WarmOptions,
} from '@forge/sandbox';
import type { Target } from '../../call/resolve.js';
import type { Ctx } from '../../engine.js';
import { EventReader, type EventSummary } from '../../events.js';
import type { RunJob } from '../../executor.js';
import { redactTextFolded, redactWithFragments, type SecretList } from '../../redact.js';
import { stopReason } from '../../refusal.js';
import type { RunSlots } from '../../runSlots.js';
import { type SandboxModule, sandboxModule } from '../../sandboxModule.js';
import type { SandboxFailure } from './classify.js';

/**
 * The invoke stage of a sandboxed run: the tool's files and mounts set up, a run slot taken, the
 * sandbox run with the call's input on stdin, its events read from descriptor 3, the call's
 * cancellation passed on. Gives the raw outcome (the sandbox's result, or why it never ran);
 * what is kept of it is keep.ts's.
 */

/** A call's target that is a forged tool. */
export type Forged = Extract<Target, { kind: 'forged' }>;
export type Runtime = ReturnType<RuntimeTable['get']>;

/** The engine's parts a run uses. */
export interface InvokePorts {
  /** Where each tool's impl is written, named by its digest; `made` once the directory exists. */
  code: { dir: string; made: () => boolean; markMade: () => void };
  /** The bound on sandboxes at once (runSlots.ts). */
  runSlots: Pick<RunSlots, 'take' | 'afterAnotherEnds'>;
  /** Sandboxes running now, aborted when forge closes. */
  running: Set<AbortController>;
  record: (type: string, data: Record<string, unknown>, secrets: SecretList) => Promise<unknown>;
  /** Null when sandboxes are not built ahead; else the directory of their per-run files (made at first use). */
  stageDir: ((sandbox: SandboxModule) => string) | null;
  /** Null when interpreters are not warmed ahead; else what a warm Python imports first. */
  warm: { pythonPreload?: readonly string[]; nodePreload?: readonly string[]; poolBytes?: number } | null;
  bwrapPath: string | undefined;
  /** Where what the host probe's trial sandbox found is kept for the next process (see @forge/sandbox probe). */
  probeCache: string;
  resolver: Resolver | undefined;
  /** Certificates trusted for placeholder secrets' hosts besides the system's roots. */
  upstreamCa: readonly string[] | undefined;
}

/** One run's request: what the sandbox gets besides the job. */
export interface RunInput {
  runtime: Runtime;
  input: unknown;
  binds: CheckedBind[];
  secrets: SecretList;
  secretEnv: Record<string, string>;
  /** The secrets delivered by placeholder: their env var holds the placeholder, the proxy puts the value in. */
  placeholders: SecretRule[];
  ctx: Ctx;
  grant: ReturnType<typeof networkFor>;
}

/** How the run was set up, for the manifest and the stages after this one. */
export interface Setup {
  command: string[];
  mounts: Mount[];
  /** The schema's `x-bind` paths, checked and held by descriptor. */
  binds: CheckedBind[];
  /** The profile's label (`bwrap`, `bwrap+net`, `bwrap+net+loopback`), the envelope's `meta.sandbox`. */
  label: string;
  /** The run's artifacts directory on the host (`/forge/artifacts` inside). */
  artifacts: string;
  /** Where the sandbox spills the whole stdout past its cap. */
  spill: string;
}

/** The raw outcome: the sandbox's result, or why it never ran. The events were read either way. */
export type Invoked = Setup & { events: EventSummary } & (
    | { ran: true; result: RunResult; cancelled: string | undefined }
    | { ran: false; error: SandboxFailure }
  );

/** The raw outcome of a run the sandbox started. */
export type Started = Extract<Invoked, { ran: true }>;

const EXTENSIONS: Record<string, string> = { python: 'py', node: 'js', bash: 'sh', sh: 'sh' };

/** Runs `job`'s tool once in the sandbox. Never throws for what the sandbox or the tool did. */
export async function invokeSandbox(ports: InvokePorts, job: RunJob<Forged>, r: RunInput): Promise<Invoked> {
  const setup = prepare(ports, job, r);
  const { ctx } = r;
  const ac = new AbortController();
  ports.running.add(ac);
  const onAbort = () => ac.abort(ctx.signal?.reason);
  ctx.signal?.addEventListener('abort', onAbort);
  if (ctx.signal?.aborted) ac.abort(ctx.signal.reason);
  // The tool's events (descriptor 3): handed to the caller as they come, summed up in the manifest.
  const events = new EventReader({ secrets: r.secrets, ...(ctx.onEvent ? { onEvent: ctx.onEvent } : {}) });
  let outcome: { ran: true; result: RunResult } | { ran: false; error: SandboxFailure };
  let summary: EventSummary;
  // A free slot first (runSlots.ts): past the bound, runs wait here in order.
  const releaseSlot = await ports.runSlots.take(ac.signal);
  try {
    // The host probe, once per process, as the run would: kept across processes, so a one-shot
    // command starts no trial sandbox while nothing it depends on has changed.
    const lib = await sandboxModule();
    await lib.probe({ ...(ports.bwrapPath ? { bwrapPath: ports.bwrapPath } : {}), cacheFile: ports.probeCache });
    const sandbox = profile(ports, job, r, setup, lib.EVENTS_FD);
    const options: RunOptions = {
      stdin: JSON.stringify(r.input ?? {}),
      stdoutFile: setup.spill,
      signal: ac.signal,
      events: (chunk) => events.push(chunk),
      // Its teardown after the call's answer (its post hooks, its record), not beside them.
      ...(job.call.answered ? { teardownAfter: job.call.answered } : {}),
      ...(ports.stageDir ? { prebuild: { stageDir: ports.stageDir(lib), ...warmFor(ports, r.runtime) } } : {}),
      ...(ports.bwrapPath ? { bwrapPath: ports.bwrapPath } : {}),
    };
    outcome = { ran: true, result: await runWhenStarted(ports.runSlots, () => lib.runSandboxed(sandbox, options), ac.signal) };
  } catch (err) {
    const code = (err as { code?: string }).code;
    // The sandbox's message may quote the end of stderr, cut before forge could redact it.
    const message = redactWithFragments((err as Error).message, r.secrets);
    const kind = code === 'sandbox_unavailable' ? 'sandbox_unavailable' : code === 'bind_denied' ? 'bind_denied' : 'internal';
    outcome = { ran: false, error: { kind, message } };
    if (code === 'sandbox_unavailable') await ports.record('sandbox.unavailable', { name: job.target.stored.name, message }, r.secrets);
  } finally {
    releaseSlot();
    ports.running.delete(ac);
    ctx.signal?.removeEventListener('abort', onAbort);
    summary = events.end();
  }
  if (!outcome.ran) return { ...setup, events: summary, ...outcome };
  return { ...setup, events: summary, ...outcome, cancelled: ac.signal.aborted ? stopReason(ac.signal) : undefined };
}

/**
 * `run()`, tried again each time another run ends while the system will not start this one for
 * want of descriptors or processes (the error says `transient`: nothing was started). A burst of
 * calls over HTTP holds a socket per call besides the runs' own descriptors; the run waits for
 * those to be freed rather than fail. With no other run going, the refusal stands.
 */
async function runWhenStarted<T>(slots: InvokePorts['runSlots'], run: () => Promise<T>, signal: AbortSignal): Promise<T> {
  for (;;) {
    try {
      return await run();
    } catch (err) {
      if ((err as { transient?: boolean }).transient !== true || !(await slots.afterAnotherEnds(signal))) throw err;
    }
  }
}

/** The run's artifacts directory made, the tool's impl written, its command and mounts. */
function prepare(ports: InvokePorts, job: RunJob<Forged>, r: RunInput): Setup {
  const { runtime, grant } = r;
  const artifacts = join(job.runDir, 'artifacts');
  mkdirSync(artifacts, { recursive: true, mode: 0o700 });
  const family = familyOf(runtime);
  const ext = EXTENSIONS[family] ?? 'txt';
  const code = codeFile(ports.code, job.target.stored, ext);
  const target = `/forge/tool/main.${ext}`;
  const command = family === 'python' ? [runtime.interpreter, '-I', '-B', target] : [runtime.interpreter, target];
  const mounts: Mount[] = [
    ...runtime.mounts.map((source) => ({ source, mode: 'ro' as const })),
    { source: code, target, mode: 'ro', perRun: true },
    { source: artifacts, target: '/forge/artifacts', mode: 'rw', perRun: true },
  ];
  return { command, mounts, binds: r.binds, label: labelOf(grant), artifacts, spill: join(job.runDir, 'stdout.partial') };
}

/** The language of `runtime`: `python` for every python3 alias, else its name. */
function familyOf(runtime: Runtime): string {
  return runtime.name.startsWith('python') ? 'python' : runtime.name;
}

/** The warm options of a run of `runtime` (the sandbox warms what it can: a Python or Node script). */
function warmFor(ports: InvokePorts, runtime: Runtime): { warm?: WarmOptions } {
  if (!ports.warm) return {};
  const { poolBytes } = ports.warm;
  const family = familyOf(runtime);
  const preload = family === 'python' ? ports.warm.pythonPreload : family === 'node' ? ports.warm.nodePreload : undefined;
  return { warm: { env: runtime.env, ...(preload ? { preload } : {}), ...(poolBytes !== undefined ? { poolBytes } : {}) } };
}

/** The sandbox profile of the run: command, environment, mounts, binds, limits, network. */
function profile(ports: InvokePorts, job: RunJob<Forged>, r: RunInput, setup: Setup, eventsFd: number): SandboxProfile {
  const { budget, runId } = job;
  const { grant } = r;
  return {
    command: setup.command,
    env: {
      ...r.runtime.env,
      FORGE_ARTIFACTS: '/forge/artifacts',
      FORGE_RUN_ID: runId,
      FORGE_EVENTS_FD: String(eventsFd),
      ...r.secretEnv,
    },
    mounts: setup.mounts,
    binds: setup.binds,
    limits: {
      timeoutMs: budget.timeout_ms,
      cpuSeconds: budget.cpu_s,
      outputBytes: budget.output_cap,
      outputDirBytes: budget.artifacts_bytes,
    },
    cwd: '/tmp',
    ...(grant.network === 'allow'
      ? {
          network: {
            grant: {
              network: 'allow' as const,
              loopback: grant.loopback,
              private_networks: grant.private_networks,
              allow_domains: grant.allow_domains,
              deny_domains: grant.deny_domains,
              allow_ports: grant.allow_ports,
            },
            // Every decision of the proxy is audited, with the run it belongs to.
            // Host names reach the proxy case-folded: a secret in one is matched in any case.
            onEvent: (ev: NetworkEvent) =>
              void ports.record(
                ev.type,
                { ...foldRedacted(ev, r.secrets), run_id: runId, name: job.target.stored.name, persona: r.ctx.persona },
                r.secrets,
              ),
            ...(ports.resolver ? { resolver: ports.resolver } : {}),
            ...(r.placeholders.length > 0 ? { placeholders: r.placeholders } : {}),
            ...(ports.upstreamCa ? { upstreamCa: ports.upstreamCa } : {}),
          },
        }
      : {}),
  };
}

/** The profile's label for a network grant. */
function labelOf(grant: Pick<ReturnType<typeof networkFor>, 'network' | 'loopback'>): string {
  if (grant.network !== 'allow') return 'bwrap';
  return grant.loopback === 'allow' ? 'bwrap+net+loopback' : 'bwrap+net';
}

/** The tool's impl as a file named by its digest (rewritten if it was changed on disk). */
function codeFile(code: InvokePorts['code'], tool: StoredTool, ext: string): string {
  const file = join(code.dir, `${tool.digest.replace(/^sha256:/, '')}.${ext}`);
  if (!code.made()) {
    mkdirSync(code.dir, { recursive: true, mode: 0o700 });
    code.markMade();
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
