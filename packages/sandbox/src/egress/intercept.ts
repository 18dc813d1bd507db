import { randomBytes } from 'node:crypto';
import { Agent, createServer, type IncomingMessage, type OutgoingHttpHeaders, request, type ServerResponse } from 'node:http';
import { isIP, type Socket } from 'node:net';
import { Transform, type TransformCallback } from 'node:stream';
import { createSecureContext, rootCertificates, type SecureContext, TLSSocket, connect as tlsConnect } from 'node:tls';
import type { RunCa } from './ca.js';

/**
 * Secrets that never enter the sandbox: the tool holds a placeholder, and the egress proxy puts
 * the real value in only where policy says (docs/security.md, "Secrets").
 *
 * A connection the tool opens (CONNECT or SOCKS5) to a host one of its placeholder secrets names
 * is intercepted: the proxy answers the tool's TLS with a certificate from the run's own CA (which
 * only the run trusts, and which certifies only those hosts), opens its own TLS to the real host,
 * verified as any client would (the system's roots, plus the operator's when given), and forwards
 * HTTP/1.1 requests one by one. In each, a header policy names for a secret of that host, holding
 * exactly the secret's format with its placeholder (`Bearer {}`), gets the real value; the
 * placeholder of any secret anywhere else (the request target, another header, the body, a header
 * not in that form) refuses the request before the host has a complete one. Responses come back
 * with every real value the connection may carry replaced by its placeholder, in headers and body
 * (the proxy asks for them unencoded, and refuses one it cannot read). Each substitution, refusal
 * and scrub is an event; none carries a value.
 *
 * What this cannot stop: a host that keeps what it receives, or reflects it transformed (encoded,
 * split) where the scrub cannot see it. Only hosts policy names for a secret ever receive it.
 */

/** One secret delivered by placeholder. */
export interface SecretRule {
  /** The secret's name (in events; never its value). */
  name: string;
  /** What the tool holds instead: unique per run and secret, unguessable, of no set length. */
  placeholder: string;
  value: string;
  /** The hosts that may receive it (lower-case names or IP literals). */
  hosts: readonly string[];
  /** The request headers it may be put in (lower-case names). */
  headers: readonly string[];
  /** The form of such a header's value, `{}` standing for the secret (`Bearer {}`; `{}` alone by default). */
  format: string;
}

/** What the proxy reports of its substitutions. Facts only: never a secret's value. */
export type SecretEvent =
  | { type: 'secret.substituted'; secret: string; host: string; port: number; header: string }
  | { type: 'secret.refused'; secret: string; host: string; port: number; where: string; message: string }
  | { type: 'secret.scrubbed'; secret: string; host: string; port: number; where: 'response headers' | 'response body' };

/** The secrets of a run that the proxy substitutes, and the CA it intercepts their hosts with. */
export interface Substitution {
  ca: RunCa;
  rules: readonly SecretRule[];
  /** Certificates (PEM) trusted for the real hosts besides the system's roots (a private host's CA). */
  upstreamCa?: readonly string[];
}

/**
 * A new placeholder for one secret in one run: 128 random bits, the same length whatever the
 * secret's, nothing of its name or value.
 */
export function newPlaceholder(): string {
  return `forge-placeholder-${randomBytes(16).toString('hex')}`;
}

/** A host as the rules name it: lower case, without brackets or a trailing dot. */
function hostName(host: string): string {
  return host
    .toLowerCase()
    .replace(/^\[(.*)\]$/, '$1')
    .replace(/\.$/, '');
}

/** Whether connections to `host` are intercepted: a rule names it. */
export function intercepts(s: Substitution | undefined, host: string): boolean {
  const h = hostName(host);
  return s?.rules.some((r) => r.hosts.includes(h)) ?? false;
}

interface InterceptOptions {
  substitution: Substitution;
  host: string;
  port: number;
  /** The first connection to the host (checked and opened by the proxy), then a way to open more. */
  first: Socket;
  reopen: () => Promise<Socket>;
  idleTimeoutMs: number;
  onEvent: (e: SecretEvent) => void;
}

/**
 * Serves the tool's side of an intercepted CONNECT (`client`, past the proxy's `200`; `head`: what
 * the tool sent after its request head) until either side is done.
 */
export function intercept(client: Socket, head: Buffer, o: InterceptOptions): void {
  const host = hostName(o.host);
  let leaf: { certPem: string; keyPem: string };
  try {
    leaf = o.substitution.ca.leaf(host);
  } catch {
    // A host its rules name that the CA was not made for: nothing to answer with.
    client.destroy();
    o.first.destroy();
    return;
  }
  const { certPem, keyPem } = leaf;
  if (head.length > 0) client.unshift(head);
  // Requests and answers are small writes, each waited on: no Nagle delay on either side.
  client.setNoDelay(true);
  const tls = new TLSSocket(client, {
    isServer: true,
    secureContext: createSecureContext({ cert: certPem, key: keyPem }),
    ALPNProtocols: ['http/1.1'],
  });
  tls.on('error', () => client.destroy());
  let first: Socket | undefined = o.first;
  const secureContext = upstreamContext(o.substitution);
  // One connection to the host at a time, kept between requests (the tool's keep-alive).
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  (agent as unknown as { createConnection: unknown }).createConnection = (_: unknown, done: (err: Error | null, s?: Socket) => void) => {
    const raw = first ? Promise.resolve(first) : o.reopen();
    first = undefined;
    raw.then(
      (socket) => {
        socket.setNoDelay(true);
        const up = tlsConnect({
          socket,
          ...(isIP(host) ? {} : { servername: host }),
          host,
          ALPNProtocols: ['http/1.1'],
          ...(secureContext ? { secureContext } : {}),
        });
        // The agent hears once: a failure of the handshake, or the connection. A later error is the
        // request's (its own listener reports it); this one keeps it from going unheard.
        let heard = false;
        const tell = (err: Error | null) => {
          if (heard) return;
          heard = true;
          done(err, err ? undefined : up);
        };
        up.on('error', tell);
        up.once('secureConnect', () => tell(null));
      },
      (err: Error) => done(err),
    );
    return undefined;
  };
  const server = createServer({ requireHostHeader: false }, (req, res) => forward(req, res, host, o, agent));
  server.on('upgrade', (_req, socket: Socket) => {
    socket.end('HTTP/1.1 501 Not Implemented\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
  });
  server.timeout = o.idleTimeoutMs;
  tls.on('close', () => {
    agent.destroy();
    o.first.destroy();
  });
  server.emit('connection', tls);
}

/**
 * The TLS context of connections to the real hosts when the operator trusts more than the system's
 * roots (undefined otherwise: Node's default, loaded once). Made once per set of certificates and
 * kept: parsing a root store takes tens of milliseconds, which every run's first request would pay.
 */
const contexts = new Map<string, SecureContext>();
function upstreamContext(s: Substitution): SecureContext | undefined {
  if (!s.upstreamCa?.length) return undefined;
  const key = s.upstreamCa.join('\n');
  let c = contexts.get(key);
  if (!c) {
    if (contexts.size >= 8) contexts.clear(); // a handful of configurations in a process, not one a run
    c = createSecureContext({ ca: [...rootCertificates, ...s.upstreamCa] });
    contexts.set(key, c);
  }
  return c;
}

// Hop-by-hop headers (RFC 9110 7.6.1): never forwarded.
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade']);

/** One request of the tool's, checked and with its secrets put in, to the host; its answer, scrubbed, back. */
function forward(req: IncomingMessage, res: ServerResponse, host: string, o: InterceptOptions, agent: Agent): void {
  const { rules } = o.substitution;
  const mine = rules.filter((r) => r.hosts.includes(host));
  const refuse = (rule: SecretRule, where: string, message: string) => {
    o.onEvent({ type: 'secret.refused', secret: rule.name, host, port: o.port, where, message });
    if (!res.headersSent) {
      res.writeHead(403, { 'content-type': 'text/plain; charset=utf-8', 'x-forge-policy': 'secret_placeholder', connection: 'close' });
      res.end(`forge egress proxy: ${message}\n`);
    } else res.destroy();
  };
  const target = req.url ?? '';
  for (const r of rules) {
    if (target.includes(r.placeholder)) return void refuse(r, 'request target', placedWrong(r, 'in the request target'));
  }
  // The connection is to this host: a request naming another (absolute form) would ask the host to
  // pass it on, secrets and all.
  if (!target.startsWith('/') && !(target === '*' && req.method === 'OPTIONS')) {
    res.writeHead(400, { 'content-type': 'text/plain; charset=utf-8', connection: 'close' });
    return void res.end(
      `forge egress proxy: a request to ${host} names its path (origin form: /…), not ${JSON.stringify(target.slice(0, 200))}\n`,
    );
  }
  const named = new Set(
    String(req.headers.connection ?? '')
      .split(',')
      .map((h) => h.trim().toLowerCase()),
  );
  const headers: OutgoingHttpHeaders = {};
  const substituted: [SecretRule, string][] = [];
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = (req.rawHeaders[i] as string).toLowerCase();
    let value = req.rawHeaders[i + 1] as string;
    if (HOP.has(name) || named.has(name)) continue;
    for (const r of rules) {
      if (!value.includes(r.placeholder)) continue;
      if (!mine.includes(r) || !r.headers.includes(name)) return void refuse(r, `header ${name}`, placedWrong(r, `in the ${name} header`));
      if (value !== r.format.replace('{}', r.placeholder))
        return void refuse(r, `header ${name}`, `the ${name} header may hold ${r.name}'s placeholder only as "${r.format}"`);
      value = r.format.replace('{}', r.value);
      substituted.push([r, name]);
    }
    const before = headers[name];
    headers[name] = before === undefined ? value : [...(Array.isArray(before) ? before : [String(before)]), value];
  }
  // A secret goes to the host the connection was opened to, verified: not to another one the
  // same server may answer for.
  const named0 = hostOf(String(req.headers.host ?? host));
  if (substituted.length > 0 && named0 !== host) {
    const [r] = substituted[0] as [SecretRule, string];
    return void refuse(r, 'header host', `a request carrying ${r.name} must name ${host} in its Host header (it named ${named0})`);
  }
  // Unencoded answers only: the scrub reads them as they come.
  headers['accept-encoding'] = 'identity';
  const up = request({ host, port: o.port, method: req.method, path: target, headers, setHost: false, agent });
  let refused = false;
  const scanned: { carry?: string } = {};
  const scanBody = new Transform({
    transform(chunk: Buffer, _enc, done: TransformCallback) {
      if (refused) return done();
      const r = findPlaceholder(rules, scanned, chunk);
      if (r) {
        refused = true;
        up.destroy(); // the host never gets a complete request
        refuse(r, 'body', placedWrong(r, 'in the request body'));
        return done();
      }
      done(null, chunk);
    },
  });
  up.on('error', (err) => {
    if (refused) return;
    const code = (err as NodeJS.ErrnoException).code ?? err.message;
    const why = /CERT|VERIFY|SELF_SIGNED|HOSTNAME|ERR_TLS/.test(code)
      ? `${host}'s certificate could not be verified (${code}): a secret goes only into a connection verified as any client would (the system's trusted roots, or a CA the operator gives for that host)`
      : `${host}:${o.port} failed (${code})`;
    if (!res.headersSent) {
      res.writeHead(502, { 'content-type': 'text/plain; charset=utf-8', connection: 'close' });
      res.end(`forge egress proxy: ${why}\n`);
    } else res.destroy();
  });
  up.on('response', (upRes) => {
    const encoding = String(upRes.headers['content-encoding'] ?? 'identity').toLowerCase();
    if (encoding !== 'identity') {
      upRes.destroy();
      res.writeHead(502, { 'content-type': 'text/plain; charset=utf-8', connection: 'close' });
      res.end(`forge egress proxy: ${host} answered with a ${encoding} body, which cannot be checked for secrets; refused\n`);
      return;
    }
    const out: OutgoingHttpHeaders = {};
    for (const [k, v] of Object.entries(upRes.headers)) {
      if (v === undefined || HOP.has(k) || k === 'content-length') continue;
      out[k] = Array.isArray(v)
        ? v.map((x) => scrub(mine, x, 'response headers', host, o))
        : scrub(mine, String(v), 'response headers', host, o);
    }
    // The scrub may change the body's length: it goes chunked.
    res.writeHead(upRes.statusCode ?? 502, scrub(mine, upRes.statusMessage ?? '', 'response headers', host, o), out);
    upRes.pipe(scrubber(mine, host, o)).pipe(res);
    upRes.on('error', () => res.destroy());
  });
  for (const [r, header] of substituted) o.onEvent({ type: 'secret.substituted', secret: r.name, host, port: o.port, header });
  req.pipe(scanBody).pipe(up);
}

/** The host part of a Host header, as certificates name it. */
function hostOf(header: string): string {
  const h = header.trim().toLowerCase();
  const v6 = /^\[([^\]]+)\](?::\d+)?$/.exec(h);
  if (v6) return v6[1] as string;
  return h.replace(/:\d+$/, '').replace(/\.$/, '');
}

/** The first rule whose placeholder `text` holds. */
export function placeholderIn(rules: readonly SecretRule[] | undefined, text: string): SecretRule | undefined {
  return rules?.find((r) => text.includes(r.placeholder));
}

export function placedWrong(r: SecretRule, where: string): string {
  return `${r.name}'s placeholder may not be sent ${where}: it is put in only in the ${r.headers.join(', ')} header${r.headers.length === 1 ? '' : 's'} of requests to ${r.hosts.join(', ')}, as "${r.format}"`;
}

/** The first rule whose placeholder shows in `chunk` (or across it and the chunk before: `state.carry`). */
function findPlaceholder(rules: readonly SecretRule[], state: { carry?: string }, chunk: Buffer): SecretRule | undefined {
  const text = (state.carry ?? '') + chunk.toString('latin1');
  const keep = Math.max(0, ...rules.map((r) => r.placeholder.length - 1));
  state.carry = text.slice(text.length - keep);
  return rules.find((r) => text.includes(r.placeholder));
}

function scrub(rules: readonly SecretRule[], text: string, where: 'response headers', host: string, o: InterceptOptions): string {
  let out = text;
  for (const r of rules) {
    if (!out.includes(r.value)) continue;
    out = out.split(r.value).join(r.placeholder);
    o.onEvent({ type: 'secret.scrubbed', secret: r.name, host, port: o.port, where });
  }
  return out;
}

/**
 * A stream that replaces every real value of `rules` by its placeholder, including one split
 * across chunks: the last (longest value − 1) bytes of each chunk wait for the next.
 */
function scrubber(rules: readonly SecretRule[], host: string, o: InterceptOptions): Transform {
  const values = rules.map((r) => ({ r, v: Buffer.from(r.value), p: Buffer.from(r.placeholder) })).filter((x) => x.v.length > 0);
  const keep = Math.max(0, ...values.map((x) => x.v.length - 1));
  let carry: Buffer = Buffer.alloc(0);
  const seen = new Set<string>();
  const replace = (buf: Buffer): Buffer => {
    let out = buf;
    for (const { r, v, p } of values) {
      let at = out.indexOf(v);
      if (at < 0) continue;
      const parts: Buffer[] = [];
      let from = 0;
      for (; at >= 0; at = out.indexOf(v, from)) {
        parts.push(out.subarray(from, at), p);
        from = at + v.length;
      }
      parts.push(out.subarray(from));
      out = Buffer.concat(parts);
      if (!seen.has(r.name)) {
        seen.add(r.name);
        o.onEvent({ type: 'secret.scrubbed', secret: r.name, host, port: o.port, where: 'response body' });
      }
    }
    return out;
  };
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      const all = replace(Buffer.concat([carry, chunk]));
      // Hold back what could be the start of a value; a value never begins in what is passed on.
      const cut = Math.max(0, all.length - keep);
      carry = all.subarray(cut);
      done(null, all.subarray(0, cut));
    },
    flush(done) {
      done(null, carry);
    },
  });
}
