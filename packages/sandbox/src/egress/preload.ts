/**
 * The preload every Node tool with network gets (`NODE_OPTIONS=--require …`), and its file on the
 * host. Node's `fetch` and the `http`/`https` modules do not read the proxy variables before
 * Node 24, so the preload routes them through the proxy by CONNECT.
 *
 * `preload` and its three parts (the routes, fetch, the http(s) agents) are serialized with
 * `Function.prototype.toString`: each must be self-contained but for the others' names, and get
 * `require` as a parameter (a bundler rewrites a free `require`).
 */
import { randomBytes } from 'node:crypto';
import { closeSync, fchmodSync, lstatSync, openSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isAlive } from '../cgroup.js';

/**
 * `fetch` gets an agent of the built-in undici's own class with a connector that tunnels
 * (installed at the first call, so tools that never fetch pay nothing); `http.globalAgent` and
 * `https.globalAgent` become tunnelling agents. A host listed in `NO_PROXY` (or `no_proxy`) is
 * connected to directly, as curl and python do: forge lists the loopback names there unless the
 * grant opens the host's loopback, so `127.0.0.1` is the sandbox's own loopback without that
 * grant and the host's (through the proxy) with it. A client that brings its own agent gets no
 * route, which fails closed.
 *
 * Every failure reaches the tool as an error it can catch: a rejected `fetch`, an 'error' event
 * on the request. A socket is handed on only once connected (and, for TLS under fetch, once the
 * handshake is done); the preload's own 'error' listeners stay on every socket it made, so an
 * error in the moment before the client attaches its own is never uncaught; each route calls
 * back exactly once. A refusal by the proxy carries a `code`: `EACCES` for a policy denial (with
 * `forgePolicy`, the rule), else the one the proxy met (`ECONNREFUSED`, `ETIMEDOUT`,
 * `ECONNRESET`, `ENOTFOUND`, …).
 */
function preload(req: NodeJS.Require, proxyPort: number): void {
  const routes = egressRoutes(req, proxyPort);
  routeFetch(req, routes);
  routeHttpAgents(req, routes);
}

type Socket = import('node:net').Socket;
type Done = (err: Error | null, socket?: Socket) => void;

/** The preload's ways to a host, shared by its fetch and http(s) parts. */
interface EgressRoutes {
  /** The host without IPv6 brackets, lowercased. */
  bare(host: string): string;
  /** Whether `host` goes direct: listed in NO_PROXY (a name also covers its subdomains, `*` all). */
  direct(host: string): boolean;
  /** Opens a CONNECT tunnel to host:port through the proxy; `done` once, with it or an error. */
  tunnel(host: string, port: number, callback: Done): void;
  /** A connected socket to host:port, direct (NO_PROXY) or tunnelled; `done` once. */
  open(host: string, port: number, callback: Done): void;
  /** TLS over a connected socket; `done` once, after the handshake or with its error. */
  secure(s: Socket, options: import('node:tls').ConnectionOptions, callback: Done): void;
}

/** The routes through the proxy's HTTP port (self-contained: serialized with {@link preload}). */
function egressRoutes(req: NodeJS.Require, proxyPort: number): EgressRoutes {
  const net = req('node:net') as typeof import('node:net');
  const tls = req('node:tls') as typeof import('node:tls');

  const bare = (host: string) => host.replace(/^\[|\]$/g, '').toLowerCase();
  const noProxy = (process.env.NO_PROXY ?? process.env.no_proxy ?? '')
    .split(',')
    .map((e) => bare(e.trim()).replace(/^\*?\./, ''))
    .filter(Boolean);
  const direct = (host: string) => {
    const h = bare(host);
    return noProxy.some((e) => e === '*' || h === e || h.endsWith(`.${e}`));
  };
  /** `done` at most once, whatever calls it later. */
  const once = (done: Done): Done => {
    let called = false;
    return (err, s) => {
      if (called) return;
      called = true;
      done(err, s);
    };
  };
  const fail = (message: string, code: string, extra: Record<string, string> = {}) => Object.assign(new Error(message), { code, ...extra });

  function tunnel(host: string, port: number, callback: Done): void {
    const done = once(callback);
    const h = bare(host);
    const authority = h.includes(':') ? `[${h}]:${port}` : `${h}:${port}`;
    const s = net.connect(proxyPort, '127.0.0.1');
    let buf = Buffer.alloc(0);
    let head = '';
    // Stays attached: an error after the hand-over is the client's, and a second call is a no-op.
    s.on('error', (err) => done(err));
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (head) return; // refused: collecting the body until the proxy closes
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      head = buf.subarray(0, end).toString('latin1');
      if (!/^HTTP\/1\.[01] 200/.test(head)) return;
      s.off('data', onData);
      s.off('end', onEnd);
      s.pause();
      const rest = buf.subarray(end + 4);
      if (rest.length > 0) s.unshift(rest);
      done(null, s);
    };
    const onEnd = () => {
      s.destroy();
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1];
      const body = head
        ? buf
            .subarray(buf.indexOf('\r\n\r\n') + 4)
            .toString('utf8')
            .trim()
        : '';
      const message = body || `forge egress proxy closed the connection to CONNECT ${authority} (HTTP ${status ?? 'no answer'})`;
      const rule = /^x-forge-policy: *(\S+)/im.exec(head)?.[1];
      if (status === '403') return done(fail(message, 'EACCES', rule ? { forgePolicy: rule } : {}));
      done(fail(message, /\((E[A-Z0-9_]+)\)$/.exec(body)?.[1] ?? (status ? 'ECONNREFUSED' : 'ECONNRESET')));
    };
    s.on('data', onData);
    s.on('end', onEnd);
    s.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
  }

  function open(host: string, port: number, callback: Done): void {
    if (!direct(host)) return void tunnel(host, port, callback);
    const done = once(callback);
    const s = net.connect(port, bare(host));
    s.on('error', (err) => done(err));
    s.once('connect', () => done(null, s));
  }

  function secure(s: Socket, options: import('node:tls').ConnectionOptions, callback: Done): void {
    const done = once(callback);
    let t: import('node:tls').TLSSocket;
    try {
      t = tls.connect({ ...options, socket: s });
    } catch (err) {
      s.destroy();
      return void done(err as Error);
    }
    t.on('error', (err) => done(err));
    t.once('secureConnect', () => done(null, t));
  }

  return { bare, direct, tunnel, open, secure };
}

/** fetch: swap in a tunnelling agent at the first call, then step aside (self-contained). */
function routeFetch(req: NodeJS.Require, routes: EgressRoutes): void {
  const net = req('node:net') as typeof import('node:net');
  const { bare, open, secure } = routes;
  const original = globalThis.fetch;
  if (typeof original === 'function') {
    const proxied = function fetch(this: unknown, ...args: Parameters<typeof original>) {
      if (globalThis.fetch === proxied) {
        const sym = Symbol.for('undici.globalDispatcher.1');
        void globalThis.Headers; // loads the built-in undici, which installs its default agent
        const g = globalThis as unknown as Record<symbol, { constructor: new (o: object) => object } | undefined>;
        const Agent = g[sym]?.constructor;
        if (Agent) {
          g[sym] = new Agent({
            connect(
              o: { hostname: string; protocol: string; port: string; servername?: string },
              cb: (err: Error | null, socket: Socket | null) => void,
            ) {
              const https = o.protocol === 'https:';
              open(o.hostname, Number(o.port) || (https ? 443 : 80), (err, s) => {
                if (err || !s) return cb(err, null);
                if (!https) return cb(null, s);
                const name = o.servername || (net.isIP(bare(o.hostname)) ? undefined : o.hostname);
                secure(s, { ALPNProtocols: ['http/1.1'], ...(name ? { servername: name } : {}) }, (e, t) =>
                  e || !t ? cb(e, null) : cb(null, t),
                );
              });
            },
          }) as unknown as { constructor: new (o: object) => object };
        }
        globalThis.fetch = original;
      }
      return original.apply(this, args);
    };
    globalThis.fetch = proxied;
  }
}

/** http and https modules: agents whose connections are tunnels, or direct for NO_PROXY hosts (self-contained). */
function routeHttpAgents(req: NodeJS.Require, routes: EgressRoutes): void {
  const net = req('node:net') as typeof import('node:net');
  const tls = req('node:tls') as typeof import('node:tls');
  const { direct, tunnel } = routes;
  const http = req('node:http') as typeof import('node:http');
  const https = req('node:https') as typeof import('node:https');
  type Duplex = import('node:stream').Duplex;
  type Created = ((err: Error | null, stream: Duplex) => void) | undefined;
  class ProxyHttpAgent extends http.Agent {
    override createConnection(o: import('node:http').ClientRequestArgs, cb?: Created): Duplex | undefined {
      const host = o.host ?? 'localhost';
      if (direct(host)) return net.connect(o as import('node:net').NetConnectOpts);
      tunnel(host, Number(o.port) || 80, (err, s) => {
        if (err || !s) return cb?.(err, s as Duplex);
        cb?.(null, s);
        s.resume(); // the request attaches its reader on the next tick and never resumes a paused socket
      });
      return undefined;
    }
  }
  class ProxyHttpsAgent extends https.Agent {
    override createConnection(o: import('node:https').RequestOptions, cb?: Created): Duplex | undefined {
      const host = o.host ?? 'localhost';
      const opts = o as import('node:tls').ConnectionOptions;
      if (direct(host)) return tls.connect(opts);
      tunnel(host, Number(o.port) || 443, (err, s) => {
        if (err || !s) return cb?.(err, s as Duplex);
        let t: Duplex;
        try {
          t = tls.connect({ ...opts, socket: s });
        } catch (e) {
          s.destroy();
          return cb?.(e as Error, s as Duplex);
        }
        cb?.(null, t); // the request sees the handshake's errors on it
      });
      return undefined;
    }
  }
  http.globalAgent = new ProxyHttpAgent({ keepAlive: true });
  https.globalAgent = new ProxyHttpsAgent({ keepAlive: true });
}

const sources = new Map<number, string>();

/** The preload's source (a CommonJS file) for the proxy's HTTP port. */
export function preloadSource(proxyPort: number): string {
  let s = sources.get(proxyPort);
  if (s === undefined) {
    const parts = [egressRoutes, routeFetch, routeHttpAgents, preload].map((f) => f.toString()).join('\n');
    s = `'use strict';\n// forge egress: route Node's fetch and http(s) through the sandbox's proxy.\n(() => {\n${parts}\npreload(require, ${proxyPort});\n})();\n`;
    sources.set(proxyPort, s);
  }
  return s;
}

const pending = new Set<string>();
let exitHook = false;

/** A run's host copy of the preload: a path first, the file once written, gone once removed. */
export interface PreloadFile {
  /** Where the file is (or will be): in the temp dir, named with this process's id and a random part. */
  readonly path: string;
  /**
   * The run's trust store beside it (`<path>.ca.pem`: the host's roots and the run's CA) and the
   * run's CA alone (`<path>.run-ca.pem`), when the run has placeholder secrets.
   */
  readonly caPath?: string;
  readonly runCaPath?: string;
  /** Writes it (mode 0644; created exclusively, so never through a link someone placed there). */
  write(): void;
  /** Removes it; idempotent. */
  remove(): void;
}

/**
 * The preload's host file for one run. Write it just before the sandbox starts and remove it as
 * soon as bwrap has mounted it (the mount keeps the file): it then exists on the host only while
 * a sandbox is being set up, so a process killed later (a test worker ended by SIGTERM) leaves
 * nothing behind. Whatever is still there when the process exits is removed then, and the first
 * write of a process removes the files of processes that died mid-setup. One file, no
 * directory: writing and removing it took 0.12–0.16 ms a run here (a run with network takes 70 ms or more).
 */
export function preloadFile(proxyPort: number, ca?: { bundle: string; own: string }): PreloadFile {
  const path = join(tmpdir(), `forge-sandbox-egress-${process.pid}-${randomBytes(6).toString('hex')}.cjs`);
  const stem = path.slice(0, -'.cjs'.length);
  const caPath = ca === undefined ? undefined : `${stem}.ca.pem`;
  const runCaPath = ca === undefined ? undefined : `${stem}.run-ca.pem`;
  const remove = () => {
    for (const file of [path, caPath, runCaPath]) if (file && pending.delete(file)) rmSync(file, { force: true });
  };
  const write = () => {
    if (!exitHook) {
      exitHook = true;
      sweepStale();
      process.once('exit', () => {
        for (const p of pending) rmSync(p, { force: true });
      });
    }
    const files: [string, string][] = [[path, preloadSource(proxyPort)]];
    if (ca && caPath && runCaPath) files.push([caPath, ca.bundle], [runCaPath, ca.own]);
    for (const [file, text] of files) {
      const fd = openSync(file, 'wx', 0o644);
      pending.add(file);
      try {
        fchmodSync(fd, 0o644); // whatever the umask: the sandbox's uid may not be this process's
        writeFileSync(fd, text);
      } catch (err) {
        remove();
        throw err;
      } finally {
        closeSync(fd);
      }
    }
  };
  return { path, ...(caPath && runCaPath ? { caPath, runCaPath } : {}), write, remove };
}

const NAME = /^forge-sandbox-egress-(\d+)-[0-9a-f]{12}\.(?:cjs|ca\.pem|run-ca\.pem)$/;

/**
 * Removes this user's preload files left by processes that are gone (killed while a sandbox was
 * being set up), once per process. A file younger than a minute is left alone: a live process in
 * another pid namespace sharing this temp dir may be mounting it right now.
 */
function sweepStale(): void {
  let names: string[];
  try {
    names = readdirSync(tmpdir());
  } catch {
    return;
  }
  const uid = process.getuid?.();
  for (const name of names) {
    const pid = Number(NAME.exec(name)?.[1]);
    if (!pid || pid === process.pid || isAlive(pid)) continue;
    const file = join(tmpdir(), name);
    const st = lstatSync(file, { throwIfNoEntry: false });
    if (!st?.isFile() || st.uid !== uid || Date.now() - st.mtimeMs < 60_000) continue;
    rmSync(file, { force: true });
  }
}
