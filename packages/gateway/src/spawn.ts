import { spawn } from 'node:child_process';
import { statSync } from 'node:fs';
import { isAbsolute, sep } from 'node:path';
import type { InjectedSecret } from '@forge/policy';
import {
  type CheckedBind,
  checkBind,
  closeBinds,
  defaultDenyList,
  type Mount,
  type NetworkAccess,
  newPlaceholder,
  type Resolver,
  resolveRuntimes,
  type SandboxProfile,
  type SecretRule,
  spawnSandboxed,
} from '@forge/sandbox';
import type { ChildExit, UpstreamChild } from './transport.js';
import type { ServerConfig } from './types.js';
import type { Launcher } from './upstream.js';

/**
 * How a stdio upstream is started: its command resolved on the host, its environment (plain and
 * secret), binds checked like hostile x-bind paths, network through forge's egress proxy, and
 * limits for a long-lived process. Nothing here starts a process except {@link spawnUnsandboxed}.
 */

/** A plan that could be made: what to start and how. */
export type SpawnPlan =
  | { sandboxed: true; profile: SandboxProfile; binds: CheckedBind[] }
  | { sandboxed: false; command: string; args: string[]; env: Record<string, string>; cwd: string };

export type PlanResult = { ok: true; plan: SpawnPlan } | { ok: false; kind: string; message: string };

export interface PlanOptions {
  /** Paths no upstream may see, besides the sandbox's deny list: forge's home (vault, audit, pins). */
  forgeState: readonly string[];
  /** Where a project-level server's binds may point (policy `bind_roots`). */
  /** Read at each start: the policy's bind roots may change while forge runs. */
  bindRoots?: readonly string[] | (() => readonly string[]);
  /** Resolves names for the egress proxy (tests map names to loopback). */
  resolver?: Resolver;
  /** Called for each egress decision of the upstream (for the audit log). */
  onNetworkEvent?: NetworkAccess['onEvent'];
  /**
   * How policy delivers each vault secret now: one delivered by placeholder reaches a sandboxed
   * server as a placeholder in its variable, and its egress proxy puts the value in (needs `network`).
   */
  secretDelivery?: (vaultNames: readonly string[]) => { inject: readonly InjectedSecret[] };
  /** Certificates trusted for those secrets' hosts besides the system's roots. */
  upstreamCa?: readonly string[];
}

/** CPU seconds of a long-lived upstream: generous, since it lives across many calls (RLIMIT_CPU is per process). */
export const UPSTREAM_CPU_SECONDS = 24 * 3600;
/** Wall clock of a long-lived upstream: it is stopped by the gateway, not by a timer. */
export const UPSTREAM_WALL_MS = 365 * 24 * 3600 * 1000;

function within(path: string, dir: string): boolean {
  return path === dir || path.startsWith(dir.endsWith(sep) ? dir : dir + sep);
}

/**
 * Environment variable → value, from the config's env and the job's secrets (env var → vault name
 * → value). A secret not handed in is left out: the runner refuses a call whose secrets are
 * missing, so only a connection made to list tools (which has none) starts without them.
 */
export function upstreamEnv(
  server: ServerConfig,
  secrets: ReadonlyMap<string, string>,
  placeholders: ReadonlyMap<string, string> = new Map(),
): Record<string, string> {
  const env: Record<string, string> = { ...server.env };
  for (const [variable, vaultName] of Object.entries(server.secrets)) {
    const value = placeholders.get(vaultName) ?? secrets.get(vaultName);
    if (value !== undefined && server.transport === 'stdio') env[variable] = value;
  }
  return env;
}

/**
 * The secrets of a sandboxed stdio server that policy delivers by placeholder (see
 * `RunOptions`' `network.placeholders`): each with a new placeholder, the rule its proxy follows.
 */
function placeholdersOf(server: ServerConfig, secrets: ReadonlyMap<string, string>, options: PlanOptions): SecretRule[] {
  if (server.unsandboxed || server.transport !== 'stdio' || !options.secretDelivery) return [];
  const names = [...new Set(Object.values(server.secrets))].filter((n) => secrets.has(n));
  return options.secretDelivery(names).inject.map((s) => ({
    ...s,
    placeholder: newPlaceholder(),
    value: secrets.get(s.name) as string,
  }));
}

/** Resolves the command: a runtime (node, python3, …) gives its interpreter and mounts; anything else is looked up on PATH. */
async function resolveCommand(
  server: ServerConfig,
  visible: (path: string) => boolean,
): Promise<{ ok: true; path: string; mounts: string[]; env: Record<string, string> } | { ok: false; kind: string; message: string }> {
  const name = server.command ?? '';
  const where = `gateway server "${server.name}" (${server.file})`;
  if (!name) return { ok: false, kind: 'invalid_config', message: `${where}: a stdio server needs a "command"` };
  const table = await resolveRuntimes();
  const runtime = table.list.find((r) => r.name === name);
  if (runtime) return { ok: true, path: runtime.interpreter, mounts: runtime.mounts, env: { ...runtime.env } };
  let path: string | undefined;
  if (isAbsolute(name)) path = name;
  else if (!name.includes('/')) {
    for (const dir of (process.env.PATH ?? '').split(':').filter(Boolean)) {
      try {
        if (statSync(`${dir}/${name}`).isFile()) {
          path = `${dir}/${name}`;
          break;
        }
      } catch {
        // not here
      }
    }
  }
  if (!path) {
    return {
      ok: false,
      kind: 'invalid_config',
      message: `${where}: command "${name}" is not a known runtime (${table.list.map((r) => r.name).join(', ')}) and was not found on PATH; give an absolute path`,
    };
  }
  if (!visible(path)) {
    return {
      ok: false,
      kind: 'invalid_config',
      message: `${where}: command ${path} would not be visible inside the sandbox; it must lie under /usr or one of the server's binds`,
    };
  }
  return { ok: true, path, mounts: [], env: {} };
}

/**
 * The plan for a stdio server: a sandbox profile, or for an operator's `unsandboxed` (user-level)
 * server the host command with a cleared environment. Refuses (`bind_denied`, `invalid_config`,
 naming the server and what to change.
 */
export async function planUpstream(server: ServerConfig, secrets: ReadonlyMap<string, string>, options: PlanOptions): Promise<PlanResult> {
  const where = `gateway server "${server.name}" (${server.file})`;
  const placeholders = placeholdersOf(server, secrets, options);
  const env = upstreamEnv(server, secrets, new Map(placeholders.map((p) => [p.name, p.placeholder])));
  if (server.unsandboxed) {
    if (server.from !== 'user') {
      return { ok: false, kind: 'invalid_config', message: `${where}: "unsandboxed" is allowed only in the user-level gateway.json` };
    }
    const command = server.command ?? '';
    if (!command) return { ok: false, kind: 'invalid_config', message: `${where}: a stdio server needs a "command"` };
    const base: Record<string, string> = {};
    for (const k of ['PATH', 'HOME', 'LANG']) {
      const v = process.env[k];
      if (v !== undefined) base[k] = v;
    }
    return { ok: true, plan: { sandboxed: false, command, args: server.args, env: { ...base, ...env }, cwd: server.cwd ?? '/tmp' } };
  }

  const projectRoots = typeof options.bindRoots === 'function' ? options.bindRoots() : (options.bindRoots ?? []);
  const roots = server.from === 'project' ? [...projectRoots] : ['/'];
  const deny = [...defaultDenyList(), ...options.forgeState];
  const binds: CheckedBind[] = [];
  for (const b of server.binds) {
    const checked = checkBind({ path: b.path, mode: b.mode }, { roots, deny });
    if (!checked.ok) {
      closeBinds(binds);
      const hint =
        server.from === 'project' && roots.length === 0
          ? ' (a project-level server may bind only under the policy bind_roots, and none are set)'
          : '';
      return { ok: false, kind: 'bind_denied', message: `${where}: ${checked.message}${hint}` };
    }
    binds.push(checked.bind);
  }
  const visible = (p: string) => within(p, '/usr') || binds.some((b) => within(p, b.path));
  const cmd = await resolveCommand(server, visible);
  if (!cmd.ok) {
    closeBinds(binds);
    return cmd;
  }
  const mounts: Mount[] = cmd.mounts.map((source) => ({ source, mode: 'ro' as const }));
  const profile: SandboxProfile = {
    command: [cmd.path, ...server.args],
    cwd: server.cwd ?? '/tmp',
    env: { ...cmd.env, ...env },
    mounts,
    binds,
    limits: {
      timeoutMs: UPSTREAM_WALL_MS,
      cpuSeconds: UPSTREAM_CPU_SECONDS,
      ...(server.limits.memory_mb ? { memoryBytes: server.limits.memory_mb * 2 ** 20 } : {}),
      ...(server.limits.processes ? { processes: server.limits.processes } : {}),
    },
  };
  if (server.network) {
    profile.network = {
      grant: {
        network: 'allow',
        allow_domains: server.network.allow_domains,
        deny_domains: server.network.deny_domains,
        allow_ports: server.network.allow_ports,
        private_networks: server.network.private_networks ? 'allow' : 'deny',
      },
      ...(options.resolver ? { resolver: options.resolver } : {}),
      ...(options.onNetworkEvent ? { onEvent: options.onNetworkEvent } : {}),
      ...(placeholders.length > 0 ? { placeholders } : {}),
      ...(options.upstreamCa ? { upstreamCa: options.upstreamCa } : {}),
    };
  }
  return { ok: true, plan: { sandboxed: true, profile, binds } };
}

const STDERR_TAIL = 8 << 10;

/** Keeps the last `max` bytes written to a stream. */
export function tailKeeper(max = STDERR_TAIL): { push(chunk: Buffer): void; text(): string } {
  let buf = Buffer.alloc(0);
  return {
    push(chunk) {
      buf = buf.length + chunk.length <= max ? Buffer.concat([buf, chunk]) : Buffer.concat([buf, chunk]).subarray(-max);
    },
    text: () => buf.toString('utf8'),
  };
}

/** Starts an unsandboxed upstream on the host: argv array (no shell), only the plan's environment. */
export function spawnUnsandboxed(plan: Extract<SpawnPlan, { sandboxed: false }>): Promise<UpstreamChild> {
  const started = Date.now();
  const child = spawn(plan.command, plan.args, { env: plan.env, cwd: plan.cwd, stdio: ['pipe', 'pipe', 'pipe'], shell: false });
  const tail = tailKeeper();
  child.stderr.on('data', (c: Buffer) => tail.push(c));
  let killed = false;
  const exited = new Promise<ChildExit>((resolve) => {
    const done = (code: number | null, signal: NodeJS.Signals | null, err?: Error) =>
      resolve({
        reason: err ? `spawn failed: ${err.message}` : killed ? 'killed' : signal ? 'signal' : 'exit',
        exitCode: code,
        signal,
        durationMs: Date.now() - started,
        stderrTail: tail.text(),
      });
    child.once('exit', (code, signal) => done(code, signal));
    child.once('error', (err) => done(null, null, err));
  });
  return new Promise((resolve, reject) => {
    child.once('spawn', () =>
      resolve({
        stdin: child.stdin,
        stdout: child.stdout,
        ...(child.pid !== undefined ? { pid: child.pid } : {}),
        stderrTail: () => tail.text(),
        kill: () => {
          if (child.exitCode !== null || child.signalCode !== null) return;
          killed = true;
          child.kill('SIGKILL');
        },
        exited,
      }),
    );
    child.once('error', (err) =>
      reject(new Error(`cannot start ${plan.command}: ${err.message}; check the command in gateway.json`, { cause: err })),
    );
  });
}

export interface LaunchOptions extends PlanOptions {
  bwrapPath?: string;
}

/**
 * The launcher of one stdio server for one set of secret values: plans it at each start (binds
 * are checked again, the command resolved again) and starts it in the sandbox, or on the host for
 * an operator's `unsandboxed` server. A host that cannot sandbox refuses (`sandbox_unavailable`):
 * never a fallback to running it bare.
 */
export function launcherFor(server: ServerConfig, secrets: ReadonlyMap<string, string>, options: LaunchOptions): Launcher {
  return async () => {
    const planned = await planUpstream(server, secrets, options);
    if (!planned.ok) return planned;
    const plan = planned.plan;
    if (!plan.sandboxed) {
      try {
        return { ok: true, child: await spawnUnsandboxed(plan), sandboxed: false };
      } catch (err) {
        return { ok: false, kind: 'upstream_unavailable', message: `gateway server "${server.name}": ${(err as Error).message}` };
      }
    }
    try {
      const box = await spawnSandboxed(plan.profile, options.bwrapPath ? { bwrapPath: options.bwrapPath } : {});
      void box.exited.finally(() => closeBinds(plan.binds));
      const child: UpstreamChild = {
        stdin: box.stdin,
        stdout: box.stdout,
        stderrTail: () => box.stderrTail(),
        ...(box.pid !== undefined ? { pid: box.pid } : {}),
        kill: () => box.kill('gateway'),
        exited: box.exited.then((e) => ({
          reason: e.reason,
          exitCode: e.exitCode,
          signal: e.signal,
          durationMs: e.durationMs,
          stderrTail: e.stderrTail,
        })),
      };
      return { ok: true, child, sandboxed: true };
    } catch (err) {
      closeBinds(plan.binds);
      const code = (err as { code?: unknown }).code;
      return {
        ok: false,
        kind:
          code === 'bind_denied' || code === 'sandbox_unavailable' || code === 'invalid_profile' ? String(code) : 'upstream_unavailable',
        message: `gateway server "${server.name}" cannot start in the sandbox: ${(err as Error).message}`,
      };
    }
  };
}
