/**
 * The sandbox side of egress: what runs and what is set inside the tool's network namespace.
 *
 * The relay is Node (the binary this process runs on, so it is always there), started by a
 * `/bin/sh` wrapper before the tool. It listens on 127.0.0.1 inside the namespace, hands the
 * listening sockets to the host process over the launcher's IPC channel (descriptor 5) and
 * exits. From then on the host accepts the tool's connections itself: the kernel queues them on
 * a socket that lives in the sandbox's namespace, and no process inside stands between the
 * tool and the proxy. The wrapper closes descriptor 5 and becomes the tool only after the host
 * has confirmed it holds both sockets, so the first connect cannot race the relay.
 *
 * The functions below are serialized with `Function.prototype.toString`: they must be
 * self-contained and get `require` as a parameter (a bundler rewrites a free `require`).
 */
import type { Server } from 'node:net';

/** Ports inside the sandbox: HTTP proxy (absolute-form and CONNECT) and SOCKS5. */
export const EGRESS_PORTS = { http: 3128, socks5: 1080 } as const;

/** Where the Node preload is mounted inside. */
export const PRELOAD_PATH = '/run/forge-egress/preload.cjs';

/** The message the host answers once it holds both listening sockets. */
export const READY = 'forge-egress-ready';

/** The descriptor of the launcher's IPC channel (its stdio index). */
export const IPC_FD = 5;

/** A relay's message: the port of the listening socket sent with it. */
export function isRelayMessage(m: unknown): m is { forgeEgress: number } {
  return typeof m === 'object' && m !== null && typeof (m as { forgeEgress?: unknown }).forgeEgress === 'number';
}

function relay(req: NodeJS.Require, ports: readonly number[], ready: string): void {
  const net = req('node:net') as typeof import('node:net');
  const send = process.send?.bind(process);
  if (!send) {
    process.stderr.write('forge egress relay: no IPC channel\n');
    process.exit(70);
  }
  process.on('message', (m) => {
    if (m === ready) process.exit(0);
  });
  process.on('disconnect', () => process.exit(70));
  for (const port of ports) {
    const server: Server = net.createServer();
    server.on('error', (err) => {
      process.stderr.write(`forge egress relay: cannot listen on 127.0.0.1:${port}: ${err.message}\n`);
      process.exit(70);
    });
    server.listen({ host: '127.0.0.1', port, backlog: 511 }, () => send({ forgeEgress: port }, server));
  }
}

/**
 * The preload every Node tool gets (`NODE_OPTIONS=--require …`): Node's `fetch` and the
 * `http`/`https` modules do not read the proxy variables before Node 24, so it routes them
 * through the proxy by CONNECT. `fetch` gets an agent of the built-in undici's own class with a
 * connector that tunnels (installed at the first call, so tools that never fetch pay nothing);
 * `http.globalAgent` and `https.globalAgent` become tunnelling agents. In-sandbox loopback goes
 * direct. A client that brings its own agent gets no route, which fails closed.
 */
function preload(req: NodeJS.Require, proxyPort: number): void {
  const net = req('node:net') as typeof import('node:net');
  type Socket = import('node:net').Socket;
  type Done = (err: Error | null, socket?: Socket) => void;
  const isLocal = (host: string) => /^(localhost|127(\.\d+){3}|\[?::1\]?)$/i.test(host);

  /** Opens a CONNECT tunnel to host:port through the proxy. */
  function tunnel(host: string, port: number, done: Done): void {
    const authority = host.includes(':') && !host.startsWith('[') ? `[${host}]:${port}` : `${host}:${port}`;
    const s = net.connect(proxyPort, '127.0.0.1');
    let buf = Buffer.alloc(0);
    let status = '';
    const onError = (err: Error) => done(err);
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (status) return; // refused: collecting the body until the proxy closes
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      status = /^HTTP\/1\.[01] (\d{3})/.exec(buf.subarray(0, end).toString('latin1'))?.[1] ?? '000';
      if (status !== '200') return;
      s.off('data', onData);
      s.off('error', onError);
      s.off('end', onEnd);
      s.pause();
      const rest = buf.subarray(end + 4);
      if (rest.length > 0) s.unshift(rest);
      done(null, s);
    };
    const onEnd = () => {
      const body = buf
        .subarray(buf.indexOf('\r\n\r\n') + 4)
        .toString('utf8')
        .trim();
      done(new Error(body || `forge egress proxy refused CONNECT ${authority} (HTTP ${status || 'no answer'})`));
    };
    s.on('data', onData);
    s.on('error', onError);
    s.on('end', onEnd);
    s.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
  }

  // fetch: swap in a tunnelling agent at the first call, then step aside.
  const original = globalThis.fetch;
  if (typeof original === 'function') {
    const proxied = function fetch(this: unknown, ...args: Parameters<typeof original>) {
      if (globalThis.fetch === proxied) {
        const sym = Symbol.for('undici.globalDispatcher.1');
        void globalThis.Headers; // loads the built-in undici, which installs its default agent
        const g = globalThis as unknown as Record<symbol, { constructor: new (o: object) => object } | undefined>;
        const Agent = g[sym]?.constructor;
        if (Agent) {
          const tls = req('node:tls') as typeof import('node:tls');
          g[sym] = new Agent({
            connect(
              o: { hostname: string; protocol: string; port: string; servername?: string },
              cb: (err: Error | null, socket: Socket | null) => void,
            ) {
              const https = o.protocol === 'https:';
              const port = Number(o.port) || (https ? 443 : 80);
              const secure = (s: Socket) => {
                const name = o.servername || (net.isIP(o.hostname.replace(/^\[|\]$/g, '')) ? undefined : o.hostname);
                const t = tls.connect({ socket: s, ALPNProtocols: ['http/1.1'], ...(name ? { servername: name } : {}) });
                t.once('secureConnect', () => cb(null, t));
                t.once('error', (err) => cb(err, null));
              };
              if (isLocal(o.hostname)) {
                const s = net.connect(port, o.hostname.replace(/^\[|\]$/g, ''));
                if (!https) return void cb(null, s);
                return void secure(s);
              }
              tunnel(o.hostname, port, (err, s) => {
                if (err || !s) return cb(err, null);
                if (https) secure(s);
                else cb(null, s);
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

  // http and https modules: agents whose connections are tunnels.
  const http = req('node:http') as typeof import('node:http');
  const https = req('node:https') as typeof import('node:https');
  const tls = req('node:tls') as typeof import('node:tls');
  type Duplex = import('node:stream').Duplex;
  type Created = ((err: Error | null, stream: Duplex) => void) | undefined;
  class ProxyHttpAgent extends http.Agent {
    override createConnection(o: import('node:http').ClientRequestArgs, cb?: Created): Duplex | undefined {
      const host = o.host ?? 'localhost';
      if (isLocal(host)) return net.connect(o as import('node:net').NetConnectOpts);
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
      if (isLocal(host)) return tls.connect(opts);
      tunnel(host, Number(o.port) || 443, (err, s) =>
        err || !s ? cb?.(err, s as Duplex) : cb?.(null, tls.connect({ ...opts, socket: s })),
      );
      return undefined;
    }
  }
  http.globalAgent = new ProxyHttpAgent({ keepAlive: true });
  https.globalAgent = new ProxyHttpsAgent({ keepAlive: true });
}

/** The relay's source, for `node -e`. */
export function relaySource(): string {
  return `(${relay.toString()})(require, ${JSON.stringify(Object.values(EGRESS_PORTS))}, ${JSON.stringify(READY)});`;
}

/** The preload's source (a CommonJS file). */
export function preloadSource(): string {
  return `'use strict';\n// forge egress: route Node's fetch and http(s) through the sandbox's proxy.\n(${preload.toString()})(require, ${EGRESS_PORTS.http});\n`;
}

/**
 * The variables that point common clients at the proxy (both cases: curl reads only the
 * lowercase `http_proxy`, others only the uppercase ones), and Node's options: the preload.
 */
export function egressEnv(existing: Readonly<Record<string, string>>): Record<string, string> {
  const http = `http://127.0.0.1:${EGRESS_PORTS.http}`;
  const vars: Record<string, string> = {
    HTTP_PROXY: http,
    HTTPS_PROXY: http,
    ALL_PROXY: `socks5h://127.0.0.1:${EGRESS_PORTS.socks5}`,
    NO_PROXY: 'localhost,127.0.0.1,::1',
  };
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(vars)) {
    out[k] = v;
    out[k.toLowerCase()] = v;
  }
  // Without the trap handler, WebAssembly (fetch's HTTP parser is) needs no 10 GiB reservation
  // per memory, which the sandbox's address-space limit would refuse. Node >= 20.15 / 22.2.
  out.NODE_OPTIONS = [existing.NODE_OPTIONS, '--disable-wasm-trap-handler', `--require ${PRELOAD_PATH}`].filter(Boolean).join(' ');
  return out;
}

/**
 * The command that starts the relay with `node`, waits for it, then becomes `command` without
 * the IPC descriptor. The relay gets neither the tool's NODE_OPTIONS (the preload) nor its own
 * environment: only the channel's variables.
 */
export function wrapCommand(node: string, command: readonly string[]): string[] {
  const script = `n=$1 r=$2; shift 2; NODE_CHANNEL_FD=${IPC_FD} NODE_CHANNEL_SERIALIZATION_MODE=json NODE_OPTIONS= "$n" -e "$r" && exec "$@" ${IPC_FD}>&-`;
  return ['/bin/sh', '-c', script, 'forge-egress', node, relaySource(), ...command];
}
