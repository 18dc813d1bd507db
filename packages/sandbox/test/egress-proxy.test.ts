/**
 * The egress proxy's protocols on the host, without a sandbox: real loopback servers and real
 * client sockets speaking HTTP (absolute-form and CONNECT) and SOCKS5 to it.
 */
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer as createHttpServer, type IncomingMessage } from 'node:http';
import { connect, createServer, type Socket } from 'node:net';
import { waitFor } from '@forge/test-utils';
import { describe, expect, it, onTestFinished } from 'vitest';
import { EgressProxy, type EgressProxyOptions, type NetworkEvent } from '../src/egress/proxy.js';
import { attachProxy, closedPort, listenLoopback as listen } from './helpers.js';

/** An HTTP server that answers with what it saw. */
async function echoHttp(): Promise<{ port: number; seen: IncomingMessage[] }> {
  const seen: IncomingMessage[] = [];
  const server = createHttpServer((req, res) => {
    seen.push(req);
    res.end(`${req.method} ${req.url} host=${req.headers.host} auth=${req.headers['proxy-authorization'] ?? '-'}`);
  });
  return { port: await listen(server), seen };
}

/** A TCP server that waits for the client's end, then writes back all it got, upper-cased, and ends. */
async function shoutAfterEnd(): Promise<number> {
  const sockets = new Set<Socket>();
  const server = createServer({ allowHalfOpen: true }, (s) => {
    sockets.add(s);
    const chunks: Buffer[] = [];
    s.on('data', (d) => chunks.push(d));
    s.on('end', () => s.end(Buffer.concat(chunks).toString().toUpperCase()));
  });
  onTestFinished(() => {
    for (const s of sockets) s.destroy();
  });
  return listen(server);
}

interface Fixture {
  proxy: EgressProxy;
  http: number;
  socks: number;
  events: NetworkEvent[];
  resolved: string[];
}

async function startProxy(options: Partial<EgressProxyOptions> = {}): Promise<Fixture> {
  const events: NetworkEvent[] = [];
  const resolved: string[] = [];
  const proxy = new EgressProxy({
    grant: { network: 'allow', loopback: 'allow', allow_domains: ['allowed.test', '*.allowed.test'] },
    resolver: async (h) => {
      resolved.push(h);
      if (h.endsWith('.test')) return ['127.0.0.1'];
      throw Object.assign(new Error('no such name'), { code: 'ENOTFOUND' });
    },
    onEvent: (e) => events.push(e),
    maxConnections: 16,
    idleTimeoutMs: 10_000,
    connectTimeoutMs: 2_000,
    hostAddresses: new Set(),
    ...options,
  });
  const { http, socks } = await attachProxy(proxy);
  return { proxy, http, socks, events, resolved };
}

/** Connects to a loopback port; the socket is destroyed when the test finishes. */
async function dial(port: number): Promise<Socket> {
  const s = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
  onTestFinished(() => {
    s.destroy();
  });
  await once(s, 'connect');
  return s;
}

/** Reads from `s` until `done(text)` holds or the socket ends; returns the text. */
function readUntil(s: Socket, done: (text: string) => boolean = () => false): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    const finish = () => {
      s.off('data', onData);
      resolve(text);
    };
    const onData = (d: Buffer) => {
      text += d.toString('latin1');
      if (done(text)) finish();
    };
    s.on('data', onData);
    s.once('end', finish);
    s.once('close', finish);
  });
}

/** Bytes from `s`, exactly `n` of them. */
async function readN(s: Socket, n: number): Promise<Buffer> {
  let buf = Buffer.alloc(0);
  while (buf.length < n) {
    let chunk = s.read() as Buffer | null;
    if (chunk === null) {
      await once(s, 'readable');
      chunk = (s.read() as Buffer | null) ?? Buffer.alloc(0);
    }
    buf = Buffer.concat([buf, chunk]);
  }
  if (buf.length > n) s.unshift(buf.subarray(n));
  return buf.subarray(0, n);
}

describe('HTTP absolute-form requests', () => {
  it('forwards to the checked address with Host taken from the request line, and proxy headers stripped', async () => {
    const target = await echoHttp();
    const f = await startProxy();
    const s = await dial(f.http);
    s.write(
      `GET http://allowed.test:${target.port}/a?b=1 HTTP/1.1\r\nHost: evil.example\r\nProxy-Authorization: Basic eDp5\r\nConnection: close\r\n\r\n`,
    );
    const res = await readUntil(s);
    expect(res).toMatch(/^HTTP\/1\.1 200 /);
    expect(res).toContain(`GET /a?b=1 host=allowed.test:${target.port} auth=-`);
    expect(f.events.map((e) => `${e.type} ${'protocol' in e ? e.protocol : '-'} ${e.host}`)).toEqual([
      'network.allowed http allowed.test',
      'network.closed http allowed.test',
    ]);
    const closed = f.events[1] as Extract<NetworkEvent, { type: 'network.closed' }>;
    expect(closed.bytesUp).toBeGreaterThan(0);
    expect(closed.bytesDown).toBeGreaterThan(0);
    expect(f.proxy.usage).toEqual({ connections: 1, denied: 0, bytesUp: closed.bytesUp, bytesDown: closed.bytesDown });
  });

  it('checks every request of a kept-alive connection: a second one to another host is refused', async () => {
    const target = await echoHttp();
    const f = await startProxy();
    const s = await dial(f.http);
    s.write(`GET http://allowed.test:${target.port}/one HTTP/1.1\r\nHost: allowed.test\r\n\r\n`);
    s.write(`GET http://127.0.0.1:${target.port}/two HTTP/1.1\r\nHost: allowed.test\r\n\r\n`);
    const text = await readUntil(s, (t) => t.includes('do not retry'));
    expect(text).toContain('GET /one');
    expect(text).toContain('HTTP/1.1 403 Forbidden');
    expect(text).toContain('x-forge-policy: allow_domains');
    expect(text).toContain('blocked by forge policy: 127.0.0.1 is not in the allowed domains (allowed.test, *.allowed.test)');
    expect(target.seen.map((r) => r.url)).toEqual(['/one']);
  });

  it('answers 400 to origin-form requests and to other schemes', async () => {
    const f = await startProxy();
    for (const line of ['GET / HTTP/1.1', 'GET https://allowed.test/ HTTP/1.1', 'GET ftp://allowed.test/ HTTP/1.1']) {
      const s = await dial(f.http);
      s.write(`${line}\r\nHost: x\r\nConnection: close\r\n\r\n`);
      const res = await readUntil(s);
      expect(res, line).toMatch(/^HTTP\/1\.1 400 /);
      expect(res).toContain('send absolute-form http:// requests, or CONNECT');
    }
    expect(f.events).toEqual([]);
  });

  it('answers 502 with the reason when the destination refuses or the name does not resolve', async () => {
    const unused = await closedPort();
    const f = await startProxy({ grant: { network: 'allow', loopback: 'allow' } });
    let s = await dial(f.http);
    s.write(`GET http://allowed.test:${unused}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    let res = await readUntil(s);
    expect(res).toMatch(/^HTTP\/1\.1 502 /);
    expect(res).toContain(`cannot connect to allowed.test:${unused} (ECONNREFUSED)`);
    expect(f.events.find((e) => e.type === 'network.closed')).toMatchObject({ error: 'ECONNREFUSED', bytesUp: 0, bytesDown: 0 });
    s = await dial(f.http);
    s.write('GET http://unknown.example/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    res = await readUntil(s);
    expect(res).toMatch(/^HTTP\/1\.1 502 /);
    expect(res).toContain('cannot resolve unknown.example (ENOTFOUND)');
    expect(f.events.at(-1)).toMatchObject({ type: 'network.denied', rule: 'resolve_failed' });
  });
});

describe('HTTP CONNECT', () => {
  it('tunnels both ways and carries a half-close through (reply after the client ends)', async () => {
    const target = await shoutAfterEnd();
    const f = await startProxy();
    const s = await dial(f.http);
    s.write(`CONNECT allowed.test:${target} HTTP/1.1\r\nHost: allowed.test:${target}\r\n\r\n`);
    expect(await readUntil(s, (t) => t.includes('\r\n\r\n'))).toBe('HTTP/1.1 200 Connection Established\r\n\r\n');
    s.end('hello through the tunnel');
    expect(await readUntil(s)).toBe('HELLO THROUGH THE TUNNEL');
    await waitFor("the tunnel's network.closed event", () => f.events.at(-1)?.type === 'network.closed');
    expect(f.events.at(-1)).toMatchObject({ type: 'network.closed', protocol: 'connect', bytesUp: 24, bytesDown: 24 });
  });

  it('carries a large download to a slow reader byte for byte (the destination waits while the tool side is full)', async () => {
    const TOTAL = 24 << 20;
    const sent = createHash('sha256');
    const server = createServer((c) => {
      let left = TOTAL;
      const pump = () => {
        while (left > 0) {
          const chunk = randomBytes(Math.min(left, 200_000));
          left -= chunk.length;
          sent.update(chunk);
          if (!c.write(chunk)) return void c.once('drain', pump);
        }
        c.end();
      };
      pump();
      c.on('error', () => {});
    });
    const target = await listen(server);
    const f = await startProxy();
    const s = await dial(f.http);
    s.write(`CONNECT allowed.test:${target} HTTP/1.1\r\nHost: allowed.test:${target}\r\n\r\n`);
    const head = 'HTTP/1.1 200 Connection Established\r\n\r\n';
    expect((await readN(s, head.length)).toString('latin1')).toBe(head);
    const got = createHash('sha256');
    let bytes = 0;
    let nextPause = 1 << 20;
    await new Promise<void>((resolve, reject) => {
      s.on('data', (d: Buffer) => {
        got.update(d);
        bytes += d.length;
        if (bytes >= nextPause) {
          // A slow reader: the proxy's writes to it back up and the tunnel must wait, not copy.
          nextPause += 1 << 20;
          s.pause();
          setTimeout(() => s.resume(), 15);
        }
      });
      s.once('end', resolve);
      s.once('error', reject);
    });
    expect(bytes).toBe(TOTAL);
    expect(got.digest('hex')).toBe(sent.digest('hex'));
    s.end();
    await once(s, 'close');
    await waitFor("the tunnel's network.closed event", () => f.events.at(-1)?.type === 'network.closed');
    expect(f.events.at(-1)).toMatchObject({ type: 'network.closed', protocol: 'connect', bytesDown: TOTAL });
  });

  it('refuses with 403 and the policy message', async () => {
    const f = await startProxy();
    const s = await dial(f.http);
    s.write('CONNECT 169.254.169.254:80 HTTP/1.1\r\nHost: 169.254.169.254:80\r\n\r\n');
    const res = await readUntil(s);
    expect(res).toMatch(/^HTTP\/1\.1 403 Forbidden\r\n/);
    expect(res).toContain('X-Forge-Policy: allow_domains');
    expect(f.events).toEqual([
      {
        type: 'network.denied',
        protocol: 'connect',
        host: '169.254.169.254',
        port: 80,
        rule: 'allow_domains',
        message:
          'blocked by forge policy: 169.254.169.254 is not in the allowed domains (allowed.test, *.allowed.test) — do not retry through another route',
      },
    ]);
  });

  it('refuses a malformed authority with 400', async () => {
    const f = await startProxy();
    const s = await dial(f.http);
    s.write('CONNECT allowed.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n');
    expect(await readUntil(s)).toMatch(/^HTTP\/1\.1 400 Bad Request/);
  });
});

describe('SOCKS5', () => {
  /** Greets, asks to CONNECT, and returns the reply code. */
  async function socksConnect(s: Socket, atyp: 1 | 3 | 4, host: string | Buffer, port: number, cmd = 1): Promise<number> {
    s.write(Buffer.from([5, 1, 0]));
    expect([...(await readN(s, 2))]).toEqual([5, 0]);
    const addr = atyp === 3 ? Buffer.concat([Buffer.from([(host as string).length]), Buffer.from(host as string)]) : (host as Buffer);
    const p = Buffer.alloc(2);
    p.writeUInt16BE(port);
    s.write(Buffer.concat([Buffer.from([5, cmd, 0, atyp]), addr, p]));
    const reply = await readN(s, 10);
    return reply[1] as number;
  }

  it('connects by name (resolved here, as socks5h) and tunnels', async () => {
    const target = await shoutAfterEnd();
    const f = await startProxy();
    const s = await dial(f.socks);
    expect(await socksConnect(s, 3, 'api.allowed.test', target)).toBe(0);
    s.end('socks');
    expect(await readUntil(s)).toBe('SOCKS');
    expect(f.resolved).toEqual(['api.allowed.test']);
  });

  it('replies "not allowed by ruleset" to denied destinations, by IPv4 and IPv6', async () => {
    const f = await startProxy({ grant: { network: 'allow' } });
    expect(await socksConnect(await dial(f.socks), 1, Buffer.from([127, 0, 0, 1]), 80)).toBe(2);
    const mapped = Buffer.alloc(16);
    mapped.writeUInt16BE(0xffff, 10);
    Buffer.from([169, 254, 169, 254]).copy(mapped, 12);
    expect(await socksConnect(await dial(f.socks), 4, mapped, 80)).toBe(2);
    expect(f.events.map((e) => (e.type === 'network.denied' ? `${e.rule} ${e.host}` : e.type))).toEqual([
      'loopback 127.0.0.1',
      'metadata 0:0:0:0:0:ffff:a9fe:a9fe',
    ]);
  });

  it('refuses BIND and UDP ASSOCIATE (command not supported), and clients without the no-auth method', async () => {
    const f = await startProxy();
    expect(await socksConnect(await dial(f.socks), 3, 'allowed.test', 80, 2)).toBe(7);
    expect(await socksConnect(await dial(f.socks), 3, 'allowed.test', 80, 3)).toBe(7);
    expect(f.events.map((e) => (e.type === 'network.denied' ? e.rule : e.type))).toEqual(['unsupported', 'unsupported']);
    const s = await dial(f.socks);
    s.write(Buffer.from([5, 1, 2])); // username/password only
    expect([...(await readN(s, 2))]).toEqual([5, 0xff]);
  });

  it('replies "connection refused" when the checked destination refuses', async () => {
    const f = await startProxy();
    expect(await socksConnect(await dial(f.socks), 3, 'allowed.test', await closedPort())).toBe(5);
  });
});

describe('limits and teardown', () => {
  it('refuses connections past maxConnections (connection_limit)', async () => {
    const target = await echoHttp();
    const f = await startProxy({ maxConnections: 2 });
    const codes: string[] = [];
    for (let i = 0; i < 3; i++) {
      const s = await dial(f.http);
      s.write(`GET http://allowed.test:${target.port}/${i} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
      codes.push((await readUntil(s)).slice(0, 12));
    }
    expect(codes).toEqual(['HTTP/1.1 200', 'HTTP/1.1 200', 'HTTP/1.1 403']);
    expect(f.events.filter((e) => e.type === 'network.denied').map((e) => e.type === 'network.denied' && e.rule)).toEqual([
      'connection_limit',
    ]);
    expect(f.proxy.usage).toMatchObject({ connections: 2, denied: 1 });
  });

  it('cuts a tunnel idle for idleTimeoutMs, and says so', async () => {
    const target = await shoutAfterEnd();
    const f = await startProxy({ idleTimeoutMs: 150 });
    const s = await dial(f.http);
    s.write(`CONNECT allowed.test:${target} HTTP/1.1\r\n\r\n`);
    await readUntil(s, (t) => t.includes('\r\n\r\n'));
    // No timing assertion (the tunnel's clock starts before this reads the reply, and a busy
    // machine may deliver that late): nothing else ends this tunnel, and the proxy says why.
    await once(s, 'end');
    expect(f.events.at(-1)).toMatchObject({ type: 'network.closed', error: 'idle timeout' });
  });

  it('close() ends live tunnels at once and accepts nothing more', async () => {
    const target = await shoutAfterEnd();
    const f = await startProxy();
    const s = await dial(f.http);
    s.write(`CONNECT allowed.test:${target} HTTP/1.1\r\n\r\n`);
    await readUntil(s, (t) => t.includes('\r\n\r\n'));
    f.proxy.close();
    await once(s, 'end');
    const late = connect({ port: f.http, host: '127.0.0.1' });
    const [err] = (await once(late, 'error')) as [NodeJS.ErrnoException];
    expect(err.code).toBe('ECONNREFUSED');
  });

  it('close() resolves only once every connection has reported network.closed', async () => {
    const target = await shoutAfterEnd();
    const f = await startProxy();
    const s = await dial(f.http);
    s.write(`CONNECT allowed.test:${target} HTTP/1.1\r\n\r\nhello`);
    await readUntil(s, (t) => t.includes('\r\n\r\n'));
    await waitFor(
      'the tunnel to carry the bytes up',
      () => f.proxy.usage.bytesUp === 0 && f.events.some((e) => e.type === 'network.allowed'),
    );
    await f.proxy.close();
    // No tick later: what a run reads right after close() is complete.
    expect(f.events.map((e) => e.type)).toEqual(['network.allowed', 'network.closed']);
    expect(f.proxy.usage.bytesUp).toBe(5);
  });

  it('keeps working when onEvent throws', async () => {
    const target = await echoHttp();
    const f = await startProxy({
      onEvent: () => {
        throw new Error('audit sink down');
      },
    });
    const s = await dial(f.http);
    s.write(`GET http://allowed.test:${target.port}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    expect(await readUntil(s)).toMatch(/^HTTP\/1\.1 200 /);
  });

  it('connects to the address it checked, even when the name would resolve differently the next time', async () => {
    const target = await echoHttp();
    const answers = [['127.0.0.1'], ['169.254.169.254']];
    const f = await startProxy({ resolver: async () => answers.shift() ?? [] });
    const s = await dial(f.http);
    s.write(`GET http://allowed.test:${target.port}/rebind HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    expect(await readUntil(s)).toContain('GET /rebind');
    expect(answers).toEqual([['169.254.169.254']]); // asked once: the second answer was never used
    expect(f.events[0]).toMatchObject({ type: 'network.allowed', address: '127.0.0.1' });
  });
});
