import { type ChildProcess, type StdioNull, type StdioPipe, spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer, type Server } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { requireSandbox as requireSandboxOn, tempDir, waitFor } from '@forge/test-utils';
import { expect, onTestFinished } from 'vitest';
import {
  discardPrebuilt,
  type Mount,
  prebuiltStats,
  probe,
  type RunOptions,
  type RunResult,
  resolveRuntimes,
  runSandboxed,
  type SandboxProfile,
  sandboxesGone,
} from '../src/index.js';

export { asRoot, isRoot, tempDir } from '@forge/test-utils';

/** python3 as a profile runs it: the real interpreter, and its prefix mounted read-only. */
export async function pythonRuntime(): Promise<{ interpreter: string; mounts: Mount[] }> {
  const rt = (await resolveRuntimes()).get('python3');
  return { interpreter: rt.interpreter, mounts: rt.mounts.map((source) => ({ source, mode: 'ro' as const })) };
}

/** Runs `cmd` to its end without blocking this process (a server it talks to may be here): its exit code and output. */
export async function runCommand(cmd: string, args: readonly string[]): Promise<{ code: number | null; out: string; err: string }> {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (c) => {
    out += c;
  });
  child.stderr.on('data', (c) => {
    err += c;
  });
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, out, err };
}

/** Listens on an ephemeral loopback port; closed, with its connections, when the test finishes. */
export async function listenLoopback(server: Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  onTestFinished(() => {
    server.close();
    (server as Server & { closeAllConnections?: () => void }).closeAllConnections?.();
  });
  return (server.address() as { port: number }).port;
}

/** The egress proxy's HTTP and SOCKS5 ports on loopback (as the relay hands it a run's), for tests of the proxy alone. */
export async function attachProxy(proxy: {
  attach(server: Server, protocol: 'http' | 'socks5'): void;
  close(): Promise<void>;
}): Promise<{ http: number; socks: number }> {
  onTestFinished(() => proxy.close());
  const httpServer = createServer();
  const socksServer = createServer();
  const ports = { http: await listenLoopback(httpServer), socks: await listenLoopback(socksServer) };
  proxy.attach(httpServer, 'http');
  proxy.attach(socksServer, 'socks5');
  return ports;
}

/** A run's end, stdout and stderr, for failure messages. */
export function describeRun(r: RunResult): string {
  return `reason=${r.reason} exit=${r.exitCode} signal=${r.signal}\n${r.stdout.toString().slice(0, 3000)}\n--- stderr\n${r.stderrTail}`;
}

/** What a run gives back, minus what differs between any two runs (its duration). */
export function outcome(r: RunResult) {
  return { reason: r.reason, exitCode: r.exitCode, signal: r.signal, stdout: r.stdout.toString(), stderr: r.stderrTail };
}

/** The files in `dir`, with their bytes. */
function filesIn(dir: string): Record<string, string> {
  return Object.fromEntries(
    readdirSync(dir)
      .sort()
      .map((n) => [n, readFileSync(join(dir, n), 'utf8')]),
  );
}

/**
 * Runs a tool cold and then warm (`warmRun`, which must have it served warm) with the same input
 * and an events sink, and expects the same outcome, the same files in `artifacts` and the same
 * events. Returns the cold run, for what the case expects of it.
 */
export async function expectWarmAsCold(
  profile: () => SandboxProfile,
  warmRun: (profile: () => SandboxProfile, options: RunOptions) => Promise<RunResult>,
  artifacts: string,
  stdin: string | undefined,
): Promise<RunResult> {
  const events: Buffer[] = [];
  const options: RunOptions = { ...(stdin !== undefined ? { stdin } : {}), events: (chunk) => events.push(chunk) };
  const cold = await runSandboxed(profile(), options);
  const coldEvents = Buffer.concat(events.splice(0)).toString();
  const coldFiles = filesIn(artifacts);
  const warm = await warmRun(profile, options);
  expect(outcome(warm), describeRun(warm)).toEqual(outcome(cold));
  expect(filesIn(artifacts)).toEqual(coldFiles);
  expect(Buffer.concat(events).toString()).toBe(coldEvents);
  return cold;
}

/** The host's `node` as forge runs it: its interpreter, its mounts and the environment it needs (NODE_OPTIONS). */
export async function nodeRuntime(): Promise<{ interpreter: string; mounts: Mount[]; env: Record<string, string> }> {
  const rt = (await resolveRuntimes()).get('node');
  return { interpreter: rt.interpreter, mounts: rt.mounts.map((source) => ({ source, mode: 'ro' as const })), env: { ...rt.env } };
}

/**
 * Python code that prints what a process sees of itself and its sandbox, minus what differs
 * between any two runs: environment, working directory, descriptors, ids, capabilities, confinement,
 * rlimits (all, or all but RLIMIT_CPU: a warm run's counts from its call), mounts, host name and pids.
 */
export function introspect(o: { cpuLimit?: boolean } = {}): string {
  const rlimits = o.cpuLimit === false ? 'n.startswith("RLIMIT_") and n != "RLIMIT_CPU"' : 'n.startswith("RLIMIT_")';
  return [
    'import os, resource',
    'print("env", sorted(os.environ.items()))',
    'print("cwd", os.getcwd())',
    'print("fds", sorted(int(f) for f in os.listdir("/proc/self/fd") if os.path.realpath("/proc/self/fd/" + f) != "/dev/null"))',
    'st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)',
    'print("ids", [st[k].split() for k in ("Uid", "Gid", "Groups")])',
    'print("caps", [st[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")])',
    'print("confined", st["NoNewPrivs"].strip(), st["Seccomp"].strip())',
    `names = [n for n in dir(resource) if ${rlimits}]`,
    'print("rlimits", sorted((n, resource.getrlimit(getattr(resource, n))) for n in names))',
    'print("mounts", [(l.split()[4], l.split()[5].split(",")[0]) for l in open("/proc/self/mountinfo")])',
    'print("hostname", os.uname().nodename, "pid", os.getpid(), "ppid", os.getppid(), "umask", os.umask(0o22))',
  ].join('\n');
}

/** A stage directory for `prebuild` in a fresh temporary directory; its waiting sandboxes are stopped when the test finishes. */
export async function stage(): Promise<{ stageDir: string; root: string }> {
  const root = await tempDir();
  const stageDir = join(root, 'stage');
  onTestFinished(async () => {
    await sandboxesGone();
    discardPrebuilt(stageDir);
  });
  return { stageDir, root };
}

/** Waits until no sandbox built ahead is still being built (fails, naming the count, when one never finishes). */
export async function builtSoon(): Promise<void> {
  await waitFor(
    () => `the sandboxes built ahead to finish building (${prebuiltStats().building} still building)`,
    () => prebuiltStats().building === 0,
    { intervalMs: 10 },
  );
}

/** Fails (never skips) when this host cannot run sandboxes, with the probe's own fix (see @forge/test-utils). */
export const requireSandbox = (): Promise<void> => requireSandboxOn(probe);

/**
 * Runs `body` in a separate node process, with this package's source loaded as `module` (through
 * vite, as the tests load it), the way an embedding process uses the sandbox; `module` also has
 * `launcherStats` and test-utils' `waitFor` (see child-module.ts). `extraStdio` are the child's
 * descriptors past 0–2; `node` another node binary; `wrap` a command that execs it (`prlimit …
 * --`). Resolves once the child closed, with its exit code, output and the process (for its
 * pid). Killed when the test finishes.
 */
export function runInChild(
  body: string,
  o: { extraStdio?: (StdioPipe | StdioNull | number)[]; node?: string; wrap?: string[] } = {},
): Promise<{ code: number | null; out: string; err: string; child: ChildProcess }> {
  const entry = fileURLToPath(new URL('./child-module.ts', import.meta.url));
  const src = fileURLToPath(new URL('../src/index.ts', import.meta.url));
  return nodeChild(`const { module } = await runnerImport(${JSON.stringify(entry)});\n${body}`, {
    argv: [...(o.wrap ?? []), o.node ?? process.execPath],
    cwd: dirname(src),
    extraStdio: o.extraStdio ?? [],
  });
}

/**
 * Runs `body` in a separate node process (behind `wrap` when given, e.g. a uid drop), where
 * `await load('<file in src>')` loads this package's source through vite, and `await waitFor(…)`
 * is test-utils' (loaded at its first use). Resolves once it closed.
 * A wrapped child may run as another uid, which may not be able to search the directories above
 * this checkout (a clone in a 0700 temporary directory): it then runs in a private mount
 * namespace where the checkout's entries are bound under a directory it can reach, and every path
 * it is given points there.
 */
export function nodeAs(body: string, o: { wrap?: string[] } = {}): Promise<{ code: number | null; out: string; err: string }> {
  const src = fileURLToPath(new URL('../src/', import.meta.url));
  const wait = fileURLToPath(new URL('../../test-utils/src/wait.ts', import.meta.url));
  const load = `const load = async (f) => (await runnerImport(${JSON.stringify(src)} + f, { cacheDir: false, logLevel: 'silent' })).module;
let waitModule;
const waitFor = async (...a) => (waitModule ??= (await runnerImport(${JSON.stringify(wait)}, { cacheDir: false, logLevel: 'silent' })).module).waitFor(...a);`;
  const reach = o.wrap ? reachableCheckout(src) : undefined;
  return nodeChild(`${load}\n${body}`, {
    argv: [...(reach?.prefix ?? []), ...(o.wrap ?? []), process.execPath],
    cwd: src,
    extraStdio: [],
    ...(reach ? { rewrite: reach.rewrite } : {}),
  });
}

/** Whether uid 65534 can search every directory above `path` (from the mode bits). */
function searchable(path: string): boolean {
  for (let d = dirname(path); ; d = dirname(d)) {
    const st = statSync(d);
    const bits = st.uid === 65534 ? st.mode >> 6 : st.gid === 65534 ? st.mode >> 3 : st.mode;
    if ((bits & 1) === 0) return false;
    if (d === '/') return true;
  }
}

/** See nodeAs: a launcher prefix that shows this checkout under a reachable directory, or undefined when it is reachable as it is. */
function reachableCheckout(cwd: string): { prefix: string[]; rewrite: (s: string) => string } | undefined {
  const repo = fileURLToPath(new URL('../../../', import.meta.url)).replace(/\/$/, '');
  if (searchable(join(repo, 'x'))) return undefined;
  const seen = mkdtempSync(join('/tmp', 'forge-sandbox-test-checkout-'));
  chmodSync(seen, 0o755);
  onTestFinished(() => rmSync(seen, { recursive: true, force: true }));
  const pairs: string[] = [];
  for (const name of readdirSync(repo)) {
    const from = join(repo, name);
    const st = lstatSync(from);
    if (st.isSymbolicLink()) continue;
    if (st.isDirectory()) mkdirSync(join(seen, name));
    else writeFileSync(join(seen, name), '');
    pairs.push(from, join(seen, name));
  }
  const binds = pairs.filter((_, i) => i % 2 === 0).map((_, k) => `mount --bind "\${${2 * k + 1}}" "\${${2 * k + 2}}"`);
  return {
    prefix: [
      'unshare',
      '--mount',
      '--propagation',
      'private',
      '--',
      '/bin/sh',
      '-c',
      // The child is started where the host sees it, and moves to the bound path inside.
      `${binds.join(' && ')} && cd "\${${pairs.length + 1}}" && shift ${pairs.length + 1} && exec "$@"`,
      'stage',
      ...pairs,
      cwd.replaceAll(repo, seen),
    ],
    rewrite: (s) => s.replaceAll(repo, seen),
  };
}

/** A node child running `code` after `runnerImport` (vite's) is in scope; killed when the test finishes. */
async function nodeChild(
  code: string,
  o: { argv: string[]; cwd: string; extraStdio: (StdioPipe | StdioNull | number)[]; rewrite?: (s: string) => string },
): Promise<{ code: number | null; out: string; err: string; child: ChildProcess }> {
  const vite = pathToFileURL(createRequire(import.meta.url).resolve('vite')).href;
  const moved = o.rewrite ?? ((s: string) => s);
  const script = moved(`const { runnerImport } = await import(${JSON.stringify(vite)});\n${code}`);
  const argv = [...o.argv, '--input-type=module', '-e', script];
  const child = spawn(argv[0] as string, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe', ...o.extraStdio], cwd: o.cwd });
  onTestFinished(() => {
    child.kill('SIGKILL');
  });
  let out = '';
  let err = '';
  child.stdout?.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr?.on('data', (c: Buffer) => (err += c.toString()));
  const exit = await new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', resolve);
  });
  return { code: exit, out, err, child };
}

/**
 * The processes descended from `root` (default: this process), found from every process's parent
 * in /proc/<pid>/stat. Tests look only at their own processes: other test workers and anything
 * else on the host run their own sandboxes.
 */
export function descendants(root = process.pid): number[] {
  const parents = new Map<number, number>();
  for (const p of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    try {
      const s = readFileSync(`/proc/${p}/stat`, 'utf8');
      parents.set(Number(p), Number(s.slice(s.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  const mine = new Set([root]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const [p, pp] of parents) {
      if (!mine.has(p) && mine.has(pp)) {
        mine.add(p);
        grew = true;
      }
    }
  }
  mine.delete(root);
  return [...mine];
}

/** A loopback port nothing listens on (taken, then let go). */
export async function closedPort(): Promise<number> {
  const srv = createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const { port } = srv.address() as { port: number };
  srv.close();
  await once(srv, 'close');
  return port;
}
