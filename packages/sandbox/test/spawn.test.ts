/**
 * spawnSandboxed: a long-lived process in the sandbox with its stdio open (an MCP server over
 * stdio, for one). Real bwrap, real node and python inside, real processes found by pid on the host.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { waitFor } from '@forge/test-utils';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { type HostInfo, type Mount, type NetworkAccess, probe, resolveRuntimes, runSandboxed, spawnSandboxed } from '../src/index.js';
import { launcherStats } from '../src/launcher.js';
import { asRoot, descendants, requireSandbox, tempDir } from './helpers.js';

let host: HostInfo;
let node: { interpreter: string; mounts: Mount[] };
let python: { interpreter: string; mounts: Mount[] };

beforeAll(async () => {
  await requireSandbox();
  host = await probe();
  const table = await resolveRuntimes();
  const nd = table.get('node');
  node = { interpreter: nd.interpreter, mounts: nd.mounts.map((source) => ({ source, mode: 'ro' as const })) };
  const py = table.get('python3');
  python = { interpreter: py.interpreter, mounts: py.mounts.map((source) => ({ source, mode: 'ro' as const })) };
});

/**
 * A line server: for each line `<op> <arg>` it answers one JSON line. `echo` echoes, `stat` says
 * whether a path exists, `write` tries to write a file, `fetch` fetches a URL, `env` reads a
 * variable, `child` starts /bin/sleep and says its pid inside. On end of stdin it exits 0.
 */
const SERVER = `
const fs = require('node:fs');
const ops = {
  echo: async (a) => a,
  stat: async (a) => fs.existsSync(a),
  write: async (a) => { try { fs.writeFileSync(a, 'x'); return 'written'; } catch (e) { return e.code; } },
  fetch: async (a) => { try { const r = await fetch(a); return 'REACHED ' + (await r.text()); } catch (e) { return 'FAILED ' + (e.cause?.message ?? e.message); } },
  env: async (a) => process.env[a] ?? null,
  child: async () => require('node:child_process').spawn('/bin/sleep', ['1000'], { stdio: 'ignore' }).pid,
};
let chain = Promise.resolve();
require('node:readline').createInterface({ input: process.stdin }).on('line', (line) => {
  const [op, ...rest] = line.split(' ');
  chain = chain.then(async () => process.stdout.write(JSON.stringify({ op, out: await ops[op](rest.join(' ')) }) + '\\n'));
}).on('close', () => chain.then(() => process.exit(0)));
`;

/** Reads stdout line by line: `next()` resolves with the next line, parsed. */
function lines(stdout: Readable): { next(): Promise<{ op: string; out: unknown }> } {
  let buf = '';
  const waiting: ((l: string) => void)[] = [];
  const ready: string[] = [];
  stdout.setEncoding('utf8');
  stdout.on('data', (chunk: string) => {
    buf += chunk;
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      const l = buf.slice(0, i);
      buf = buf.slice(i + 1);
      const w = waiting.shift();
      w ? w(l) : ready.push(l);
    }
  });
  return {
    next: () =>
      new Promise((resolve) => {
        const l = ready.shift();
        if (l !== undefined) return resolve(JSON.parse(l));
        waiting.push((x) => resolve(JSON.parse(x)));
      }),
  };
}

/** Starts the line server in a sandbox; killed when the test finishes. `marker` names its processes on the host. */
async function server(extra: { mounts?: Mount[]; network?: NetworkAccess; env?: Record<string, string> } = {}, marker = uniqueMarker()) {
  const sb = await spawnSandboxed({
    command: [node.interpreter, '-e', SERVER, marker],
    mounts: [...node.mounts, ...(extra.mounts ?? [])],
    ...(extra.network ? { network: extra.network } : {}),
    ...(extra.env ? { env: extra.env } : {}),
  });
  onTestFinished(() => sb.kill());
  const rpc = lines(sb.stdout);
  const ask = async (line: string) => {
    sb.stdin.write(`${line}\n`);
    return (await rpc.next()).out;
  };
  return { sb, ask, marker };
}

let markers = 0;
const uniqueMarker = () => `forge-spawn-test-${process.pid}-${++markers}`;

/** This process's descendants whose command line holds `marker`. */
function pidsWith(marker: string): number[] {
  return descendants().filter((p) => {
    try {
      return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(marker);
    } catch {
      return false;
    }
  });
}

/** The directories of the sandbox cgroups (under a `forge-sandbox` base) that hold `pid`. */
function cgroupsOf(pid: number): string[] {
  const bases = host.cgroups?.bases ?? [];
  const paths = readFileSync(`/proc/${pid}/cgroup`, 'utf8')
    .split('\n')
    .map((l) => l.split(':')[2] ?? '')
    .filter((p) => p.startsWith('/forge-sandbox/'));
  return [...new Set(bases.flatMap((b) => paths.map((p) => join(dirname(b), p)).filter((d) => existsSync(join(d, 'cgroup.procs')))))];
}

/** True while `pid` is a live process (not gone, not a zombie). */
function alive(pid: number): boolean {
  try {
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch {
    return false;
  }
}

/** Waits (up to 10 s, scaled) until none of `pids` is alive, failing with those left; returns those still alive. */
async function gone(pids: number[]): Promise<number[]> {
  await waitFor(
    () => `processes ${pids.join(', ')} to end (alive: ${pids.filter(alive).join(', ')})`,
    () => !pids.some(alive),
    { timeoutMs: 10_000, intervalMs: 50 },
  );
  return pids.filter(alive);
}

describe('spawnSandboxed', () => {
  it('an echo server answers line by line; ending stdin gives it EOF and it exits 0', async () => {
    const { sb, ask } = await server();
    for (const word of ['one', 'two', 'three', 'a longer line with spaces']) expect(await ask(`echo ${word}`)).toBe(word);
    sb.stdin.end();
    const end = await sb.exited;
    expect(end).toMatchObject({ reason: 'exit', exitCode: 0, signal: null, processLimitHit: false });
  });

  it('sees only what is mounted: a file outside is absent, a read-only mount cannot be written', async () => {
    const outside = await tempDir();
    writeFileSync(join(outside, 'secret'), 'no');
    const shared = await tempDir();
    writeFileSync(join(shared, 'data'), 'yes');
    // Readable by the sandbox's uid, as a trusted mount must be (when this process is root, it is not this one's).
    chmodSync(shared, 0o755);
    chmodSync(join(shared, 'data'), 0o644);
    const { sb, ask } = await server({ mounts: [{ source: shared, mode: 'ro' }] });
    expect(await ask(`stat ${join(shared, 'data')}`)).toBe(true);
    expect(await ask(`stat ${join(outside, 'secret')}`)).toBe(false);
    expect(await ask(`stat ${outside}`)).toBe(false);
    expect(await ask(`write ${join(shared, 'data')}`)).toBe('EROFS');
    expect(await ask(`write ${join(shared, 'new')}`)).toBe('EROFS');
    sb.stdin.end();
    expect((await sb.exited).reason).toBe('exit');
    expect(readFileSync(join(shared, 'data'), 'utf8')).toBe('yes');
    expect(readdirSync(shared)).toEqual(['data']);
  });

  it('has no network without a grant; with one it reaches a host server only through the proxy, and network() counts it', async () => {
    const hits: string[] = [];
    const http = createServer((req, res) => {
      hits.push(req.url ?? '');
      res.end('host');
    });
    http.listen(0, '127.0.0.1');
    await once(http, 'listening');
    onTestFinished(() => void http.close());
    const port = (http.address() as { port: number }).port;

    const closed = await server();
    expect(closed.sb.network()).toBeUndefined();
    expect(await closed.ask(`fetch http://127.0.0.1:${port}/nogrant`)).toMatch(/^FAILED/);
    closed.sb.stdin.end();
    await closed.sb.exited;
    expect(hits).toEqual([]);

    const network: NetworkAccess = {
      grant: { network: 'allow', loopback: 'allow', allow_domains: ['allowed.test'] },
      resolver: async (name) => (name.endsWith('.test') ? ['127.0.0.1'] : []),
    };
    const open = await server({ network });
    expect(open.sb.network()).toMatchObject({ connections: 0 });
    expect(await open.ask(`fetch http://allowed.test:${port}/granted`)).toBe('REACHED host');
    expect(await open.ask(`fetch http://other.test:${port}/denied`)).toMatch(/^FAILED/);
    expect(hits).toEqual(['/granted']);
    const usage = open.sb.network();
    expect(usage?.connections).toBeGreaterThanOrEqual(1);
    expect(usage?.denied).toBeGreaterThanOrEqual(1);
    // The proxy lives as long as the process: a later request still goes through.
    expect(await open.ask(`fetch http://allowed.test:${port}/again`)).toBe('REACHED host');
    open.sb.stdin.end();
    expect((await open.sb.exited).reason).toBe('exit');
  });

  it('kill() ends it and every process it started, and exited says signal', async () => {
    const { sb, ask, marker } = await server();
    expect(typeof (await ask('child'))).toBe('number');
    // The sandbox's processes on the host: bwrap, its init, the server, and the sleep the server started.
    const all = [...new Set(pidsWith(marker).flatMap((p) => [p, ...descendants(p)]))];
    const sleeps = all.filter((p) => readFileSync(`/proc/${p}/cmdline`, 'utf8').startsWith('/bin/sleep'));
    expect(sleeps).toHaveLength(1);
    // Every process of the sandbox descends from the pid it reports (its launcher).
    expect(typeof sb.pid).toBe('number');
    expect(descendants(sb.pid as number)).toEqual(expect.arrayContaining(sleeps));
    // In the run's cgroups, where runs get them (as root, or in a delegated subtree).
    const groups = cgroupsOf(sleeps[0] as number);
    expect(groups.length > 0).toBe(host.cgroups !== undefined);
    sb.kill('test');
    const end = await sb.exited;
    expect(end).toMatchObject({ reason: 'signal', exitCode: null, signal: 'SIGKILL' });
    expect(await gone(all)).toEqual([]);
    // Its cgroups hold no process any more (they go back to the pool runs share).
    for (const dir of groups) expect(existsSync(dir) ? readFileSync(join(dir, 'cgroup.procs'), 'utf8') : '', dir).toBe('');
  });

  // Launchers wait ready only where runs join cgroups (root here): elsewhere nothing is gained by it.
  asRoot('works on a launcher started ahead for runs (a process that ran runSandboxed has some waiting)', async () => {
    expect((await runSandboxed({ command: ['/bin/true'] })).reason).toBe('exit');
    await waitFor('a launcher started ahead to be ready', () => launcherStats().ready > 0, { intervalMs: 10 });
    const before = launcherStats();
    expect(before.ready, 'a launcher waits ready after a run with cgroups').toBeGreaterThan(0);
    const { sb, ask, marker } = await server();
    expect(launcherStats().warmStarts).toBe(before.warmStarts + 1);
    expect(await ask('echo warm')).toBe('warm');
    const pids = pidsWith(marker);
    sb.kill();
    expect((await sb.exited).reason).toBe('signal');
    expect(await gone(pids)).toEqual([]);
  });

  it('the abort signal kills it', async () => {
    const ac = new AbortController();
    const marker = uniqueMarker();
    const sb = await spawnSandboxed({ command: [node.interpreter, '-e', SERVER, marker], mounts: node.mounts }, { signal: ac.signal });
    onTestFinished(() => sb.kill());
    // Answered once: the server is running (the start mark comes before the exec into node).
    const rpc = lines(sb.stdout);
    sb.stdin.write('echo up\n');
    expect((await rpc.next()).out).toBe('up');
    const pids = pidsWith(marker);
    expect(pids.length).toBeGreaterThan(0);
    ac.abort();
    expect(await sb.exited).toMatchObject({ reason: 'signal', signal: 'SIGKILL' });
    expect(await gone(pids)).toEqual([]);
  });

  it('a parent that is SIGKILLed takes the sandbox with it', async () => {
    const marker = uniqueMarker();
    const src = fileURLToPath(new URL('../src/index.ts', import.meta.url));
    const vite = pathToFileURL(createRequire(import.meta.url).resolve('vite')).href;
    const script = `const { runnerImport } = await import(${JSON.stringify(vite)});
const { module } = await runnerImport(${JSON.stringify(src)});
const sb = await module.spawnSandboxed({ command: ['/bin/sh', '-c', 'echo up; exec /bin/sleep 1000', ${JSON.stringify(marker)}] });
sb.stdout.on('data', (d) => process.stdout.write(d));`;
    const parent = spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'pipe'],
      cwd: fileURLToPath(new URL('.', import.meta.url)),
    });
    onTestFinished(() => void parent.kill('SIGKILL'));
    let err = '';
    parent.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const [first] = (await once(parent.stdout, 'data')) as [Buffer];
    expect(first.toString(), err).toBe('up\n');
    // "up" is written before the shell execs sleep: wait for the exec (at most 10 s, scaled) before looking.
    const sleeping = (ps: number[]) =>
      ps.some((p) => {
        try {
          return readFileSync(`/proc/${p}/cmdline`, 'utf8').startsWith('/bin/sleep');
        } catch {
          return false;
        }
      });
    const pids = await waitFor(
      () => `the sandboxed shell to exec /bin/sleep (the parent's processes: ${descendants(parent.pid).join(', ')})`,
      () => {
        const ps = descendants(parent.pid);
        return sleeping(ps) && ps;
      },
      { timeoutMs: 10_000, intervalMs: 50 },
    );
    expect(sleeping(pids), String(pids)).toBe(true);
    parent.kill('SIGKILL');
    await once(parent, 'close');
    expect(await gone(pids)).toEqual([]);
    // The killed parent could not remove its own temporary directories (/etc shown, staging).
    for (const name of readdirSync(tmpdir())) {
      if (name.startsWith('forge-sandbox-') && name.includes(`-${parent.pid}-`))
        rmSync(join(tmpdir(), name), { recursive: true, force: true });
    }
  });

  asRoot('as root: its processes run as a host uid that is not 0', async () => {
    expect(process.getuid?.(), 'this case runs as root').toBe(0);
    const { sb, ask, marker } = await server();
    expect(sb.hostUid).not.toBe(0);
    await ask('child');
    const all = [...new Set(pidsWith(marker).flatMap((p) => [p, ...descendants(p)]))];
    expect(all.length).toBeGreaterThanOrEqual(3);
    for (const p of all) {
      const uids = /^Uid:\s+(.*)$/m
        .exec(readFileSync(`/proc/${p}/status`, 'utf8'))?.[1]
        ?.split(/\s+/)
        .map(Number);
      expect(uids, `pid ${p}`).toEqual([sb.hostUid, sb.hostUid, sb.hostUid, sb.hostUid]);
    }
    expect(sb.enforced).toEqual({ memory: 'cgroup', cpu: 'cgroup', pids: 'cgroup' });
  });

  asRoot('as root (memory cgroup): a process that outgrows its memory limit is killed, reason memory', async () => {
    const hold = "import time; b = b'x' * (400 << 20); print('held', flush=True); time.sleep(1000)";
    const sb = await spawnSandboxed({
      command: ['/bin/sh', '-c', 'IFS= read -r x; echo go; exec "$0" -I -c "$1"', python.interpreter, hold],
      mounts: python.mounts,
      limits: { memoryBytes: 128 << 20 },
    });
    onTestFinished(() => sb.kill());
    sb.stdin.write('grow\n');
    const end = await sb.exited;
    expect(end.reason, end.stderrTail).toBe('memory');
  });

  it('a fork loop hits the process limit, whichever mechanism holds it (pids cgroup, or RLIMIT_NPROC in its own namespace)', async () => {
    // dash gives up at the first fork that fails: the limit ends this runaway, and is reported.
    const forks = await spawnSandboxed({
      command: ['/bin/sh', '-c', 'while :; do /bin/sleep 1000 & done'],
      limits: { processes: 8 },
    });
    onTestFinished(() => forks.kill());
    const after = await forks.exited;
    expect(after.processLimitHit, after.stderrTail).toBe(forks.enforced.pids === 'cgroup');
    expect(forks.enforced.pids).toBe(typeof host.processLimit === 'object' ? 'cgroup' : host.processLimit);
    expect(after.stderrTail).toMatch(/fork/i);
    expect(after.startFailure).toBeUndefined();
  });

  it('keeps profile.env out of the host process list, and the process sees it', async () => {
    const secret = `forge-secret-${process.pid}-${Date.now()}`;
    const { sb, ask } = await server({ env: { UPSTREAM_TOKEN: secret } });
    expect(await ask('env UPSTREAM_TOKEN')).toBe(secret);
    const shown = readdirSync('/proc')
      .filter((p) => /^\d+$/.test(p))
      .filter((p) => {
        try {
          return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(secret);
        } catch {
          return false;
        }
      });
    expect(shown).toEqual([]);
    sb.stdin.end();
    await sb.exited;
  });

  it('refuses per-run rw mounts, naming them, and starts nothing', async () => {
    const out = await tempDir();
    const marker = uniqueMarker();
    const err = await spawnSandboxed({
      command: ['/bin/sh', '-c', 'sleep 100', marker],
      mounts: [{ source: out, mode: 'rw', perRun: true }],
    }).catch((e) => e);
    expect(err).toMatchObject({ code: 'invalid_profile' });
    expect(err.message).toContain(out);
    expect(err.message).toMatch(/runSandboxed/);
    expect(pidsWith(marker)).toEqual([]);
    expect(existsSync(out)).toBe(true);
  });
});
