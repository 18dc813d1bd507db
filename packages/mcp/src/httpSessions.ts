/** The 2025 era over HTTP: one session per initialize, each with its own server, transport and forge session. */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Forge } from '@forge/runner';
import type { NodeStreamableHTTPServerTransport } from '@modelcontextprotocol/node';
import type { Server } from '@modelcontextprotocol/server';
import { SessionEventStore } from './eventStore.js';
import type { HttpCaller } from './httpAccess.js';
import { fail, requestId } from './httpJson.js';
import type { Inflight } from './inflight.js';
import { buildServer, type ForgeMcpServerOptions } from './server.js';
import { admitSession, type SessionLimits } from './sessionLimits.js';

interface Session {
  server: Server;
  transport: NodeStreamableHTTPServerTransport;
  dispose(): void;
  /** Which token opened it (a digest, or `loopback` without tokens); every later request must carry the same one. */
  principal: string;
  /** Requests of this session being answered now (a notification stream counts while open). */
  open: number;
  /** When its last request ended (ms since the epoch). */
  lastSeen: number;
}

/** What {@link SessionTable} is built from. */
export interface SessionTableOptions {
  forge: Forge;
  inflight: Inflight;
  maxBody: number;
  limits: SessionLimits;
  naming: Pick<ForgeMcpServerOptions, 'name' | 'version' | 'toolsmith'>;
  Transport: typeof NodeStreamableHTTPServerTransport;
}

/** The open 2025-era sessions of one HTTP server, by id; idle ones are closed by a sweep. */
export class SessionTable {
  readonly #o: SessionTableOptions;
  readonly #sessions = new Map<string, Session>();
  #sweep: NodeJS.Timeout | undefined;

  constructor(o: SessionTableOptions) {
    this.#o = o;
  }

  /** Closes idle sessions from now on, by a sweep that never keeps the process alive. */
  startSweeping(): void {
    this.#sweep = setInterval(() => this.#closeIdle(), this.#o.limits.sweepMs);
    this.#sweep.unref();
  }

  has(id: string): boolean {
    return this.#sessions.has(id);
  }

  ids(): string[] {
    return [...this.#sessions.keys()];
  }

  /** Answers a request of the open session `id`; `track` sees a POST's response. */
  async serve(
    id: string,
    req: IncomingMessage,
    res: ServerResponse,
    body: unknown,
    caller: HttpCaller,
    track: (res: ServerResponse) => void,
  ) {
    const s = this.#sessions.get(id);
    if (!s) return fail(res, 404, 'session not found: it was closed or never existed; initialize a new one');
    if (s.principal !== caller.principal) return fail(res, 403, 'this session belongs to another credential');
    s.open++;
    if (req.method === 'POST') track(res);
    try {
      await s.transport.handleRequest(req, res, body);
      // A notification stream (GET) stays open after handleRequest returns: count it until it closes.
      if (!res.writableEnded) await new Promise<void>((r) => res.once('close', () => r()));
    } finally {
      s.open--;
      s.lastSeen = Date.now();
    }
  }

  /** Opens a session for an initialize request, within the caps (429 or 503 past them). */
  async open(req: IncomingMessage, res: ServerResponse, body: unknown, caller: HttpCaller): Promise<void> {
    const { forge, inflight, maxBody, limits, naming, Transport } = this.#o;
    // No await between this check and the set below: concurrent initializes cannot overshoot a cap.
    const admitted = admitSession(this.#sessions.values(), caller.principal, caller.who, limits);
    if (!admitted.ok) {
      res.setHeader('Retry-After', String(admitted.retryAfterS));
      return fail(res, admitted.status, admitted.message, -32000, requestId(body));
    }
    const id = randomUUID();
    const built = buildServer(forge, { ctx: { ...caller.ctx, session: id }, era: 'legacy', ownsSession: id, ...naming }, inflight);
    const transport = new Transport({
      sessionIdGenerator: () => id,
      onsessionclosed: (closed) => this.#drop(closed),
      // Resumable streams: a client that lost its SSE stream reconnects with Last-Event-ID and
      // gets what it missed (within the store's bounds), told by the priming event when to retry.
      eventStore: new SessionEventStore(),
      retryInterval: 1000,
      maxRequestBodySize: maxBody,
    });
    built.server.onclose = () => this.#drop(id);
    this.#sessions.set(id, { ...built, transport, principal: caller.principal, open: 0, lastSeen: Date.now() });
    await built.server.connect(transport);
    await transport.handleRequest(req, res, body);
    // An initialize the transport refused leaves no session behind.
    if (transport.sessionId === undefined) {
      this.#drop(id);
      await built.server.close().catch(() => {});
    }
  }

  /** Stops the idle sweep. */
  stopSweeping(): void {
    clearInterval(this.#sweep);
  }

  /** Closes every session. */
  async closeAll(): Promise<void> {
    for (const [id, s] of [...this.#sessions]) {
      this.#drop(id);
      await s.server.close().catch(() => {});
    }
  }

  #drop(id: string): void {
    const s = this.#sessions.get(id);
    if (!s) return;
    this.#sessions.delete(id);
    s.dispose();
  }

  #closeIdle(): void {
    const now = Date.now();
    for (const [id, s] of [...this.#sessions]) {
      if (s.open === 0 && now - s.lastSeen >= this.#o.limits.idleMs) {
        this.#drop(id);
        void s.server.close().catch(() => {});
      }
    }
  }
}
