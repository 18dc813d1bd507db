import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import type { NetworkGrant } from '@forge/policy';
import type { NetworkEvent, Resolver, RuntimeTable, SandboxProfile, WarmOptions } from '@forge/sandbox';
import { type SandboxModule, sandboxModule } from '../sandboxModule.js';
import type { HookFile } from './find.js';

/**
 * Running one hook: in a sandbox of its own, as a tool runs (no host path but its own code, no
 * network unless policy `hooks.network` grants it, read-only but its private /tmp, bounded in time, CPU, memory and output), with the
 * call's event as JSON on stdin. Its code is a copy named by its digest, so what ran is what the
 * audit entry names. The verdict: exit 0 lets the call go on (stdout empty, or one JSON object
 * that rewrites it); exit 2 refuses it, stderr being the reason; anything else (another exit, a
 * signal, a limit, stdout that is not such an object) fails closed.
 */

/** What a hook may use: at most this long, this much CPU and memory, this much stdout. */
export const HOOK_LIMITS = { timeoutMs: 10_000, cpuSeconds: 5, memoryBytes: 256 << 20, outputBytes: 1 << 20 } as const;

/** A hook's verdict. */
export type HookVerdict =
  | { verdict: 'allow'; rewrite?: Record<string, unknown>; ms: number }
  | { verdict: 'deny'; reason: string; ms: number }
  | { verdict: 'fail'; reason: string; ms: number };

/** Where hook code is copied, and how the interpreters named by `#!` are found. */
export interface HookPorts {
  codeDir: string;
  runtimes(): Promise<RuntimeTable>;
  bwrapPath?: string;
  signal?: AbortSignal;
  /** Keeps the hook's sandbox until this settles (the call's answer): its teardown comes after the call's next runs. */
  teardownAfter?: PromiseLike<void>;
  /** Where sandboxes built ahead wait (as for tools), when the engine builds them; hooks then take one. */
  stageDir?: (lib: SandboxModule) => string;
  /** Warm interpreters (as for tools): a Python hook is served by one when given. */
  warm?: { pythonPreload?: readonly string[]; poolBytes?: number };
  /** The network policy `hooks.network` grants (through the egress proxy), and who hears each decision. */
  network?: { grant: NetworkGrant; onEvent: (event: NetworkEvent) => void; resolver?: Resolver };
}

const SYSTEM = /^\/(usr|bin|sbin|lib|lib64)\//;
const INSIDE = '/forge/hook/main';

/** The command inside the sandbox for a hook's `#!` line, and the mounts its interpreter needs. */
async function commandOf(
  hook: HookFile,
  ports: HookPorts,
): Promise<{ command: string[]; mounts: SandboxProfile['mounts']; env?: Readonly<Record<string, string>>; python?: boolean } | string> {
  const head = hook.bytes.subarray(0, 256).toString('utf8');
  if (!head.startsWith('#!')) return 'has no #! line naming its interpreter (#!/bin/sh, #!/usr/bin/env python3, …)';
  const words = (head.slice(2).split('\n')[0] ?? '').trim().split(/\s+/).filter(Boolean);
  const [interp, ...args] = words;
  if (!interp) return 'has an empty #! line';
  if (interp === '/usr/bin/env' || interp === '/bin/env') {
    const [name, ...rest] = args;
    if (!name || name.startsWith('-')) return `has "#!${interp}" without an interpreter name`;
    const table = await ports.runtimes();
    try {
      const rt = await table.resolve(name);
      return {
        command: [rt.interpreter, ...rest, INSIDE],
        mounts: rt.mounts.map((m) => ({ source: m, mode: 'ro' as const })),
        env: rt.env,
        python: rt.name.startsWith('python') && rest.length === 0,
      };
    } catch {
      // Not a runtime forge resolves: a program of /usr/bin, which the sandbox shows as the host has it.
      const at = `/usr/bin/${name}`;
      if (!/^[A-Za-z0-9._+-]+$/.test(name) || name.startsWith('.') || !isFile(at))
        return `names "${name}" after #!/usr/bin/env, which is neither a runtime forge knows (python3, node, bash, sh) nor a program in /usr/bin; name an installed interpreter`;
      return { command: [at, ...rest, INSIDE], mounts: [] };
    }
  }
  if (!SYSTEM.test(interp) || posix.normalize(interp) !== interp)
    return `names ${interp} as its interpreter, which is not a plain path under /usr, /bin or /lib (all the sandbox shows of the host); name one there, or use #!/usr/bin/env <name>`;
  if (!isFile(interp)) return `names ${interp} as its interpreter, which is not installed on this host; install it or name another`;
  return { command: [interp, ...args, INSIDE], mounts: [] };
}

/** A Python hook's warm options, as a Python tool's (a sandbox with python3 already running). */
function warmFor(ports: HookPorts, cmd: { env?: Readonly<Record<string, string>>; python?: boolean }): { warm?: WarmOptions } {
  if (!ports.warm || !cmd.python) return {};
  const { pythonPreload, poolBytes } = ports.warm;
  return {
    warm: { env: cmd.env ?? {}, ...(pythonPreload ? { preload: pythonPreload } : {}), ...(poolBytes !== undefined ? { poolBytes } : {}) },
  };
}

function isFile(p: string): boolean {
  try {
    return statSync(p).isFile();
  } catch {
    return false;
  }
}

/** The hook's code as a file named by its digest (written when missing or changed). */
function codeCopy(codeDir: string, hook: HookFile): string {
  mkdirSync(codeDir, { recursive: true, mode: 0o700 });
  const file = join(codeDir, `hook-${hook.digest.replace(/^sha256:/, '')}`);
  let current: Buffer | undefined;
  try {
    current = readFileSync(file);
  } catch {
    current = undefined;
  }
  if (!current?.equals(hook.bytes)) {
    const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
    writeFileSync(tmp, hook.bytes, { mode: 0o400, flag: 'wx' });
    renameSync(tmp, file);
  }
  return file;
}

/** Runs `hook` on `event`; `key` is what a rewrite must hold (`input` or `envelope`). */
export async function runHook(
  hook: HookFile,
  event: Record<string, unknown>,
  key: 'input' | 'envelope',
  ports: HookPorts,
): Promise<HookVerdict> {
  const started = performance.now();
  const ms = () => Math.round(performance.now() - started);
  const cmd = await commandOf(hook, ports);
  if (typeof cmd === 'string') return { verdict: 'fail', reason: cmd, ms: ms() };
  const lib = await sandboxModule();
  const { runSandboxed } = lib;
  const profile: SandboxProfile = {
    command: cmd.command,
    env: { ...cmd.env, FORGE_HOOK: String(event.hook) },
    mounts: [...(cmd.mounts ?? []), { source: codeCopy(ports.codeDir, hook), target: INSIDE, mode: 'ro', perRun: true }],
    limits: {
      timeoutMs: HOOK_LIMITS.timeoutMs,
      cpuSeconds: HOOK_LIMITS.cpuSeconds,
      memoryBytes: HOOK_LIMITS.memoryBytes,
      outputBytes: HOOK_LIMITS.outputBytes,
      outputHardBytes: HOOK_LIMITS.outputBytes,
    },
    cwd: '/tmp',
    ...(ports.network && ports.network.grant.network === 'allow'
      ? {
          network: {
            grant: ports.network.grant,
            onEvent: ports.network.onEvent,
            ...(ports.network.resolver ? { resolver: ports.network.resolver } : {}),
          },
        }
      : {}),
  };
  let r: Awaited<ReturnType<typeof runSandboxed>>;
  try {
    r = await runSandboxed(profile, {
      stdin: JSON.stringify(event),
      ...(ports.bwrapPath ? { bwrapPath: ports.bwrapPath } : {}),
      ...(ports.signal ? { signal: ports.signal } : {}),
      ...(ports.teardownAfter ? { teardownAfter: ports.teardownAfter } : {}),
      // A call runs its hooks one after another, faster than a sandbox is built: two of a shape wait.
      // A `#!/bin/sh` hook is read by the shell already waiting in its sandbox (one exec less).
      ...(ports.stageDir ? { prebuild: { stageDir: ports.stageDir(lib), ...warmFor(ports, cmd), ready: 2, shell: true } } : {}),
    });
  } catch (err) {
    return { verdict: 'fail', reason: `could not be run: ${(err as Error).message}`, ms: ms() };
  }
  const stderr = r.stderrTail.trim().slice(-1000);
  if (r.reason !== 'exit') {
    const why =
      r.reason === 'timeout'
        ? `did not finish within ${HOOK_LIMITS.timeoutMs} ms`
        : `was stopped (${r.reason}${r.signal ? `, ${r.signal}` : ''})`;
    return { verdict: 'fail', reason: why, ms: ms() };
  }
  if (r.exitCode === 2) return { verdict: 'deny', reason: stderr || 'refused (exit 2, nothing on stderr)', ms: ms() };
  if (r.exitCode !== 0) return { verdict: 'fail', reason: `exited ${r.exitCode}${stderr ? `: ${stderr}` : ''}`, ms: ms() };
  const out = r.stdout.toString('utf8').trim();
  if (out === '') return { verdict: 'allow', ms: ms() };
  let doc: unknown;
  try {
    doc = JSON.parse(out);
  } catch {
    return { verdict: 'fail', reason: `printed something that is not JSON (a hook prints nothing, or {"${key}": …})`, ms: ms() };
  }
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc) || Object.keys(doc).join() !== key)
    return { verdict: 'fail', reason: `printed JSON that is not {"${key}": …} (a hook prints nothing, or exactly that)`, ms: ms() };
  return { verdict: 'allow', rewrite: doc as Record<string, unknown>, ms: ms() };
}
