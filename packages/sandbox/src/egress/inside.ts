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
import type { NetworkGrant } from './guard.js';

/** Ports inside the sandbox: HTTP proxy (absolute-form and CONNECT) and SOCKS5. */
export const EGRESS_PORTS = { http: 3128, socks5: 1080 } as const;

/** Where the Node preload is mounted inside. */
export const PRELOAD_PATH = '/run/forge-egress/preload.cjs';
/** Where a run with placeholder secrets finds its trust store: the host's roots and the run's own CA. */
export const CA_PATH = '/run/forge-egress/ca.pem';
/** The run's own CA alone: what Node adds to its bundled roots (NODE_EXTRA_CA_CERTS). */
export const RUN_CA_PATH = '/run/forge-egress/run-ca.pem';

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

/** The relay's source, for `node -e`. */
export function relaySource(): string {
  return `(${relay.toString()})(require, ${JSON.stringify(Object.values(EGRESS_PORTS))}, ${JSON.stringify(READY)});`;
}

/** The loopback names NO_PROXY lists when the sandbox's loopback is its own. */
export const LOOPBACK_NAMES = 'localhost,127.0.0.1,::1';

const PROXY_VARS = /^(https?|all|no)_proxy$/i;

/**
 * The environment of a run with network: `existing` without any proxy variables of its own, then
 * the ones that point common clients at the proxy (both cases: curl reads only the lowercase
 * `http_proxy`, others only the uppercase ones) and Node's options (the preload).
 *
 * Loopback: without `grant.loopback: allow`, `NO_PROXY` lists the loopback names, so
 * `127.0.0.1` and `localhost` are the sandbox's own loopback (a tool may serve itself there).
 * With it, there is no `NO_PROXY`: loopback goes to the proxy like any destination and reaches
 * the host's loopback, which is what the grant says. A tool that serves itself on loopback then
 * reaches its own server only by ignoring the proxy (a raw socket, or its own NO_PROXY).
 */
export function egressEnv(
  existing: Readonly<Record<string, string>>,
  grant: Pick<NetworkGrant, 'loopback'>,
  ca = false,
): Record<string, string> {
  const http = `http://127.0.0.1:${EGRESS_PORTS.http}`;
  const vars: Record<string, string> = {
    HTTP_PROXY: http,
    HTTPS_PROXY: http,
    ALL_PROXY: `socks5h://127.0.0.1:${EGRESS_PORTS.socks5}`,
    ...(grant.loopback === 'allow' ? {} : { NO_PROXY: LOOPBACK_NAMES }),
  };
  // The run's trust store, as OpenSSL (Python's ssl, curl's OpenSSL build), requests, curl and
  // Node read it: its CA answers for the hosts of its placeholder secrets.
  const trust: Record<string, string> = ca
    ? { SSL_CERT_FILE: CA_PATH, REQUESTS_CA_BUNDLE: CA_PATH, CURL_CA_BUNDLE: CA_PATH, NODE_EXTRA_CA_CERTS: RUN_CA_PATH }
    : {};
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(existing)) if (!PROXY_VARS.test(k)) out[k] = v;
  for (const [k, v] of Object.entries(vars)) {
    out[k] = v;
    out[k.toLowerCase()] = v;
  }
  Object.assign(out, trust);
  // Without the trap handler, WebAssembly (fetch's HTTP parser is) needs no 10 GiB reservation
  // per memory, which the sandbox's address-space limit would refuse. Node >= 20.15 / 22.2.
  out.NODE_OPTIONS = [existing.NODE_OPTIONS, '--disable-wasm-trap-handler', `--require ${PRELOAD_PATH}`].filter(Boolean).join(' ');
  return out;
}

/**
 * The command that starts the relay with `node`, waits for it, then becomes `command` without
 * the IPC descriptor. The relay gets the channel's variables, and neither the tool's NODE_OPTIONS
 * (the preload) nor its extra CA certificates (it makes no TLS connection).
 */
export function wrapCommand(node: string, command: readonly string[]): string[] {
  const script = `n=$1 r=$2; shift 2; NODE_CHANNEL_FD=${IPC_FD} NODE_CHANNEL_SERIALIZATION_MODE=json NODE_OPTIONS= NODE_EXTRA_CA_CERTS= "$n" -e "$r" && exec "$@" ${IPC_FD}>&-`;
  return ['/bin/sh', '-c', script, 'forge-egress', node, relaySource(), ...command];
}
