/**
 * Node's preload (fetch, http.get, https.get) when a connection fails: every failure must reach
 * the tool as a rejection or an 'error' event it can catch, never as an uncaught exception that
 * kills it. Real bwrap, real node inside, real servers on the host's loopback and inside the
 * sandbox: a port nobody listens on, a server that resets, a destination the proxy refuses, and
 * a listener whose accept queue is full (SYNs are dropped: a blackhole) with a short
 * connectTimeoutMs.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { type Mount, type NetworkEvent, type RunResult, resolveRuntimes, runSandboxed } from '../src/index.js';
import { closedPort, requireSandbox } from './helpers.js';

let node: { interpreter: string; mounts: Mount[] };
let python: string;

beforeAll(async () => {
  await requireSandbox();
  const table = await resolveRuntimes();
  const nd = table.get('node');
  node = { interpreter: nd.interpreter, mounts: nd.mounts.map((source) => ({ source, mode: 'ro' as const })) };
  python = table.get('python3').interpreter;
});

/** Listens on an ephemeral loopback port; closed (with its connections) when the test finishes. */
async function listen(server: Server): Promise<number> {
  const sockets = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  onTestFinished(() => {
    server.close();
    for (const s of sockets) s.destroy();
  });
  return (server.address() as { port: number }).port;
}

/** A server that answers every connection with a TCP reset, at once or once the request is in. */
function resetting(when: 'accept' | 'request'): Promise<number> {
  return listen(
    createServer((s) => {
      if (when === 'accept') return void s.resetAndDestroy();
      s.once('data', () => s.resetAndDestroy());
    }),
  );
}

/**
 * A loopback port where connecting hangs: a listener that never accepts, its accept queue filled
 * by one connection, so the kernel drops every further SYN. Node's net servers always accept, so
 * the listener is a python process (killed when the test finishes).
 */
async function blackhole(): Promise<number> {
  const child: ChildProcess = spawn(
    python,
    [
      '-c',
      "import socket,sys\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen(0)\nprint(s.getsockname()[1],flush=True)\nsys.stdin.read()",
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  onTestFinished(() => {
    child.kill('SIGKILL');
  });
  const [line] = (await once(child.stdout as NodeJS.ReadableStream, 'data')) as [Buffer];
  const port = Number(line.toString().trim());
  const filler = connect(port, '127.0.0.1');
  filler.on('error', () => {});
  onTestFinished(() => {
    filler.destroy();
  });
  await once(filler, 'connect');
  return port;
}

/**
 * The tool: each URL through each client, one line per attempt: `CAUGHT <client> <url> <code>
 * <message>` when the failure reached the tool as an error it could catch, `ANSWERED …` when a
 * server answered, `HUNG …` when neither happened in 8 s. `DONE` once all are through. No handler
 * for uncaught exceptions: one of those kills the tool, and the lines stop.
 */
const tool = `(async () => {
  const http = require('node:http');
  const https = require('node:https');
  const net = require('node:net');
  // An in-sandbox server that resets every connection, reached directly (NO_PROXY).
  const rst = net.createServer((s) => s.resetAndDestroy()).listen(0, '127.0.0.1');
  await new Promise((r) => rst.once('listening', r));
  const inside = rst.address().port;
  // A port nobody listens on, inside.
  const gone = net.createServer().listen(0, '127.0.0.1');
  await new Promise((r) => gone.once('listening', r));
  const closed = gone.address().port;
  await new Promise((r) => gone.close(r));
  const get = (mod) => (url) => new Promise((resolve, reject) => {
    const req = mod.get(url, (r) => { r.resume(); r.on('end', () => resolve(r.statusCode)); r.on('error', reject); });
    req.on('error', reject);
  });
  const clients = { fetch: (url) => fetch(url).then((r) => r.status), 'http.get': get(http), 'https.get': get(https) };
  const urls = JSON.parse(process.argv[1]).map((u) => u.replace('INSIDE', inside).replace('CLOSED', closed));
  for (const url of urls) {
    for (const [name, client] of Object.entries(clients)) {
      if (name === 'http.get' && url.startsWith('https:')) continue;
      if (name === 'https.get' && url.startsWith('http:')) continue;
      let timer;
      const hung = new Promise((r) => (timer = setTimeout(() => r('HUNG'), 8000)));
      try {
        const status = await Promise.race([client(url), hung]);
        console.log(status === 'HUNG' ? 'HUNG' : 'ANSWERED', name, url, status);
      } catch (e) {
        const c = e.cause ?? e;
        console.log('CAUGHT', name, url, c.code ?? '-', String(c.message).replace(/\\n/g, ' '));
      } finally {
        clearTimeout(timer);
      }
    }
  }
  rst.close();
  console.log('DONE');
})();`;

function describeRun(r: RunResult): string {
  return `reason=${r.reason} exit=${r.exitCode}\n--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderrTail}`;
}

/** Runs the tool on `urls`; returns the lines and the run. */
async function attempt(urls: string[], grant: { loopback?: 'allow' | 'deny' }, events: NetworkEvent[], connectTimeoutMs = 10_000) {
  const r = await runSandboxed({
    command: [node.interpreter, '-e', tool, JSON.stringify(urls)],
    mounts: node.mounts,
    network: {
      grant: { network: 'allow', allow_domains: ['allowed.test'], ...grant },
      resolver: async (name) => (name.endsWith('.test') ? ['127.0.0.1'] : []),
      onEvent: (e) => events.push(e),
      connectTimeoutMs,
    },
    limits: { timeoutMs: 30_000 },
  });
  return { r, lines: r.stdout.toString().trim().split('\n') };
}

describe('every failure of the preload’s routes reaches the tool as an error it can catch', () => {
  it('through the proxy: refused, reset, denied and timed out, for fetch, http.get and https.get', async () => {
    const refused = await closedPort();
    const reset = await resetting('accept');
    const midway = await resetting('request');
    const hole = await blackhole();
    const urls = [
      `http://allowed.test:${refused}/refused`,
      `https://allowed.test:${refused}/refused`,
      `http://allowed.test:${reset}/reset`,
      `https://allowed.test:${reset}/reset`,
      `http://allowed.test:${midway}/midway`,
      `https://allowed.test:${midway}/midway`,
      `http://denied.test:${reset}/denied`,
      `https://denied.test:${reset}/denied`,
      `http://allowed.test:${hole}/timeout`,
      `https://allowed.test:${hole}/timeout`,
    ];
    const events: NetworkEvent[] = [];
    const { r, lines } = await attempt(urls, { loopback: 'allow' }, events, 500);
    expect(lines.at(-1), describeRun(r)).toBe('DONE');
    expect(r.exitCode, describeRun(r)).toBe(0);
    const body = lines.slice(0, -1);
    expect(body.length, describeRun(r)).toBe(20);
    for (const line of body) expect(line, describeRun(r)).toMatch(/^CAUGHT /);
    const codes = body.map((l) => l.split(' ').slice(0, 4).join(' '));
    expect(codes.filter((l) => l.includes('/refused')).map((l) => l.split(' ')[3])).toEqual(Array(4).fill('ECONNREFUSED'));
    expect(codes.filter((l) => l.includes('/denied')).map((l) => l.split(' ')[3])).toEqual(Array(4).fill('EACCES'));
    expect(codes.filter((l) => l.includes('/timeout')).map((l) => l.split(' ')[3])).toEqual(Array(4).fill('ETIMEDOUT'));
    // A reset once the tunnel is up reaches the tool as a reset, not as a clean end of the reply.
    expect(codes.filter((l) => l.includes('/midway')).map((l) => l.split(' ')[3])).toEqual(Array(4).fill('ECONNRESET'));
    for (const l of body.filter((x) => x.includes('/denied'))) expect(l).toContain('blocked by forge policy');
    expect(r.stderrTail).not.toMatch(/Unhandled|uncaught/i);
  });

  it('direct to the sandbox’s own loopback: refused and reset, for fetch, http.get and https.get', async () => {
    const urls = [
      'http://127.0.0.1:CLOSED/refused',
      'https://127.0.0.1:CLOSED/refused',
      'http://127.0.0.1:INSIDE/reset',
      'https://127.0.0.1:INSIDE/reset',
    ];
    const events: NetworkEvent[] = [];
    const { r, lines } = await attempt(urls, {}, events);
    expect(lines.at(-1), describeRun(r)).toBe('DONE');
    expect(r.exitCode, describeRun(r)).toBe(0);
    const body = lines.slice(0, -1);
    expect(body.length, describeRun(r)).toBe(8);
    for (const line of body) expect(line, describeRun(r)).toMatch(/^CAUGHT /);
    expect(events).toEqual([]); // in-sandbox loopback never reaches the proxy without the grant
  });
});
