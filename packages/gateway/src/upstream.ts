import { injectTrace, type ToolEvent } from '@forge/runner';
import { Client, StreamableHTTPClientTransport, type Transport } from '@modelcontextprotocol/client';
import { type ChildExit, ChildTransport, type UpstreamChild } from './transport.js';
import type { ServerConfig, ToolDefinition } from './types.js';

/**
 * One connection to one upstream MCP server (for one set of secret values): started on first
 * need, listed and called through the official SDK client, restarted after a crash with backoff,
 * refused by a breaker after repeated failed starts. Every start and exit is reported through
 * `record` (for the audit log); nothing reported holds a secret value.
 */

/** The protocol versions the gateway speaks to upstreams: the stable ones, nothing else. */
export const ACCEPTED_PROTOCOL_VERSIONS = Object.freeze(['2024-11-05', '2025-03-26', '2025-06-18', '2025-11-25', '2026-07-28'] as const);
// Newest first: the client asks for the first and accepts any of them in the answer.
const LEGACY_VERSIONS = ACCEPTED_PROTOCOL_VERSIONS.filter((v) => v !== '2026-07-28').reverse();

/** Bounds of what an upstream may list. */
export const LIST_LIMITS = Object.freeze({ tools: 1000, pages: 100, descriptionBytes: 32 << 10, schemaBytes: 256 << 10 });

/** Backoff before restart n (1-based count of failures in a row): 0 after the first, then 250 ms doubling to 30 s. */
export function restartDelay(failures: number): number {
  if (failures <= 1) return 0;
  return Math.min(250 * 2 ** (failures - 2), 30_000);
}
/** Failed starts in a row that open the breaker, and how long it stays open. */
export const BREAKER = Object.freeze({ failedStarts: 5, coolDownMs: 30_000 });

export type Failure = { ok: false; kind: string; message: string; outcome: 'failure' | 'none' };

/** What starts the upstream's process (sandboxed or not). */
export type Launcher = () => Promise<{ ok: true; child: UpstreamChild; sandboxed: boolean } | { ok: false; kind: string; message: string }>;

export interface UpstreamOptions {
  server: ServerConfig;
  /** Environment for http: `Authorization` → `Bearer <value>` when the config names a secret for it. */
  authorization?: string;
  /** Starts a stdio upstream's process. */
  launch?: Launcher;
  /** Appends an audit entry (fire and forget here; the source waits where it matters). */
  record: (type: string, data: Record<string, unknown>) => void;
  /** Called after the upstream's tool list was re-read because it said it changed. */
  onToolsChanged: (upstream: Upstream) => void;
  now?: () => number;
  /** Time allowed to start and initialize (ms). */
  startTimeoutMs?: number;
}

export interface CallOptions {
  signal: AbortSignal;
  timeoutMs: number;
  onEvent?: ((event: ToolEvent) => void) | undefined;
}

export interface CallOutcome {
  ok: true;
  result: { content?: unknown[]; structuredContent?: unknown; isError?: boolean };
}

interface Conn {
  client: Client;
  transport: Transport;
  child?: UpstreamChild;
  /** Settles with why the connection died (never on a deliberate close). */
  died: Promise<string>;
  closing: boolean;
  inflight: Set<CallOptions>;
}

const LEVELS = new Set(['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency']);

function describeExit(exit: ChildExit | undefined, reason: string | undefined): string {
  const what =
    reason ??
    (exit
      ? `${exit.reason}${exit.exitCode !== null ? ` (exit code ${exit.exitCode})` : exit.signal ? ` (${exit.signal})` : ''}`
      : 'closed the connection');
  const tail = exit?.stderrTail.trim();
  return tail ? `${what}; its stderr ends: ${tail.slice(-1000)}` : what;
}

function byteLength(v: unknown): number {
  return v === undefined ? 0 : Buffer.byteLength(JSON.stringify(v));
}

export class Upstream {
  readonly server: ServerConfig;
  state: 'stopped' | 'starting' | 'running' | 'failed' = 'stopped';
  protocolVersion: string | undefined;
  serverInfo: { name: string; version: string } | undefined;
  sandboxed: boolean;
  pid: number | undefined;
  /** Starts after the first (restarts), failed starts in a row, failures (starts or crashes) in a row. */
  restarts = 0;
  failedStarts = 0;
  failures = 0;
  lastError: string | undefined;
  breakerUntil = 0;
  /** The upstream's tools as last listed on this connection (undefined until listed). */
  tools: ToolDefinition[] | undefined;
  /** Tools skipped for their names or sizes in the last listing: name → why. */
  skipped = new Map<string, string>();

  readonly #opts: UpstreamOptions;
  readonly #now: () => number;
  #conn: Conn | undefined;
  #starting: Promise<Conn | Failure> | undefined;
  #lastEnd = 0;
  #starts = 0;
  #closed = false;

  constructor(options: UpstreamOptions) {
    this.#opts = options;
    this.server = options.server;
    this.sandboxed = options.server.transport === 'stdio' && !options.server.unsandboxed;
    this.#now = options.now ?? Date.now;
  }

  get #label(): string {
    return `gateway server "${this.server.name}"`;
  }

  /** The running connection, starting it (after the backoff) when there is none. */
  ensure(signal?: AbortSignal): Promise<Conn | Failure> {
    if (this.#conn) return Promise.resolve(this.#conn);
    if (this.#closed) return Promise.resolve(this.#fail(`${this.#label}: the gateway is closed`));
    if (this.#now() < this.breakerUntil) {
      return Promise.resolve(
        this.#fail(
          `${this.#label}: breaker open after ${this.failedStarts} failed starts in a row, retry after ${new Date(this.breakerUntil).toISOString()} (last error: ${this.lastError ?? 'unknown'})`,
        ),
      );
    }
    this.#starting ??= this.#start(signal).finally(() => {
      this.#starting = undefined;
    });
    return this.#starting;
  }

  #fail(message: string, kind = 'upstream_unavailable'): Failure {
    return { ok: false, kind, message, outcome: 'failure' };
  }

  async #start(signal?: AbortSignal): Promise<Conn | Failure> {
    const wait = restartDelay(this.failures) - (this.#now() - this.#lastEnd);
    if (this.failures > 0 && wait > 0) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, wait);
        signal?.addEventListener(
          'abort',
          () => {
            clearTimeout(t);
            resolve();
          },
          { once: true },
        );
      });
      if (signal?.aborted)
        return { ok: false, kind: 'cancelled', message: `${this.#label}: cancelled while waiting to restart`, outcome: 'none' };
    }
    this.state = 'starting';
    const started = await this.#connect();
    if (!('client' in started)) {
      this.failedStarts++;
      this.failures++;
      this.#lastEnd = this.#now();
      this.state = 'failed';
      this.lastError = started.message;
      this.#opts.record('gateway.upstream_exited', {
        server: this.server.name,
        phase: 'start',
        kind: started.kind,
        failed_starts: this.failedStarts,
      });
      if (this.failedStarts >= BREAKER.failedStarts) this.breakerUntil = this.#now() + BREAKER.coolDownMs;
      return started;
    }
    this.failedStarts = 0;
    if (this.#starts++ > 0) this.restarts++;
    this.state = 'running';
    this.lastError = undefined;
    this.#conn = started;
    this.#opts.record('gateway.upstream_started', {
      server: this.server.name,
      transport: this.server.transport,
      sandboxed: this.sandboxed,
      ...(this.pid !== undefined ? { pid: this.pid } : {}),
      ...(this.server.url ? { url: this.server.url } : {}),
      protocol_version: this.protocolVersion,
      server_info: this.serverInfo,
      restarts: this.restarts,
    });
    void started.died.then((why) => this.#died(started, why));
    return started;
  }

  async #connect(): Promise<Conn | Failure> {
    let child: UpstreamChild | undefined;
    let transport: Transport;
    let childTransport: ChildTransport | undefined;
    if (this.server.transport === 'http') {
      if (!this.server.url) return this.#fail(`${this.#label}: an http server needs a "url"`, 'invalid_config');
      const headers: Record<string, string> = {};
      if (this.#opts.authorization !== undefined) headers.Authorization = `Bearer ${this.#opts.authorization}`;
      transport = new StreamableHTTPClientTransport(new URL(this.server.url), { requestInit: { headers } });
      this.sandboxed = false;
    } else {
      if (!this.#opts.launch) return this.#fail(`${this.#label}: no launcher`, 'internal');
      const launched = await this.#opts.launch();
      if (!launched.ok) return { ...launched, outcome: 'failure' };
      child = launched.child;
      this.sandboxed = launched.sandboxed;
      this.pid = child.pid;
      childTransport = new ChildTransport(child, { label: this.#label });
      transport = childTransport;
    }
    const client = new Client(
      { name: 'forge-gateway', version: '0.0.0' },
      { capabilities: {}, supportedProtocolVersions: [...LEGACY_VERSIONS], versionNegotiation: { mode: 'auto' } },
    );
    const conn: Conn = { client, transport, died: Promise.resolve(''), closing: false, inflight: new Set() };
    if (child) conn.child = child;
    let resolveDied!: (why: string) => void;
    conn.died = new Promise((r) => {
      resolveDied = r;
    });
    client.onclose = () => {
      if (conn.closing) return;
      if (child) void child.exited.then((exit) => resolveDied(describeExit(exit, childTransport?.closeReason)));
      else resolveDied('the connection closed');
    };
    client.setNotificationHandler('notifications/message', (n) => {
      const p = n.params as { level?: unknown; data?: unknown; logger?: unknown };
      const level = typeof p.level === 'string' && LEVELS.has(p.level) ? (p.level as 'info') : 'info';
      const event: ToolEvent = typeof p.data === 'string' ? { type: 'log', level, message: p.data } : { type: 'log', level, data: p.data };
      for (const call of conn.inflight) call.onEvent?.(event);
    });
    client.setNotificationHandler('notifications/tools/list_changed', () => {
      void this.list(true)
        .then((r) => {
          if (r.ok) this.#opts.onToolsChanged(this);
        })
        .catch((err: unknown) =>
          process.emitWarning(`forge gateway: ${this.#label}: re-listing after list_changed failed: ${(err as Error).message}`),
        );
    });
    const timeout = this.#opts.startTimeoutMs ?? 30_000;
    try {
      await client.connect(transport, { timeout });
    } catch (err) {
      conn.closing = true;
      child?.kill();
      await client.close().catch(() => {});
      const answered = childTransport?.answeredVersion;
      if (answered !== undefined && !(ACCEPTED_PROTOCOL_VERSIONS as readonly string[]).includes(answered)) {
        return this.#fail(
          `${this.#label} answered with protocol version ${answered}, which forge does not speak; accepted: ${ACCEPTED_PROTOCOL_VERSIONS.join(', ')} (upgrade or pin the server to a stable version)`,
          'protocol_unsupported',
        );
      }
      const exit = child ? await Promise.race([child.exited, new Promise<undefined>((r) => setTimeout(r, 200, undefined))]) : undefined;
      const why = err instanceof Error ? err.message : String(err);
      return this.#fail(`${this.#label} did not start: ${why}${exit ? `; it ${describeExit(exit, undefined)}` : ''}`);
    }
    const version = client.getNegotiatedProtocolVersion();
    if (version === undefined || !(ACCEPTED_PROTOCOL_VERSIONS as readonly string[]).includes(version)) {
      conn.closing = true;
      await client.close().catch(() => {});
      child?.kill();
      return this.#fail(
        `${this.#label} negotiated protocol version ${version ?? '(none)'}, which forge does not speak; accepted: ${ACCEPTED_PROTOCOL_VERSIONS.join(', ')}`,
        'protocol_unsupported',
      );
    }
    this.protocolVersion = version;
    const info = client.getServerVersion();
    this.serverInfo = info ? { name: String(info.name), version: String(info.version) } : undefined;
    return conn;
  }

  #died(conn: Conn, why: string): void {
    if (this.#conn !== conn) return;
    this.#conn = undefined;
    this.tools = undefined;
    this.state = 'stopped';
    this.failures++;
    this.#lastEnd = this.#now();
    this.lastError = `${this.#label} ${why}`;
    this.#opts.record('gateway.upstream_exited', {
      server: this.server.name,
      phase: 'running',
      inflight: conn.inflight.size,
      ...(this.pid !== undefined ? { pid: this.pid } : {}),
    });
    void conn.client.close().catch(() => {});
  }

  /** Lists the upstream's tools (all pages, within {@link LIST_LIMITS}), cached until it says they changed. */
  async list(refresh = false): Promise<{ ok: true; tools: ToolDefinition[] } | Failure> {
    const conn = await this.ensure();
    if (!('client' in conn)) return conn;
    if (this.tools && !refresh) return { ok: true, tools: this.tools };
    const tools: ToolDefinition[] = [];
    const skipped = new Map<string, string>();
    let cursor: string | undefined;
    try {
      for (let page = 0; page < LIST_LIMITS.pages; page++) {
        const res = await Promise.race([
          conn.client.listTools(cursor ? { cursor } : {}, { cacheMode: 'refresh', timeout: 30_000 }),
          conn.died.then((why) => {
            throw new Error(why);
          }),
        ]);
        for (const t of res.tools) {
          if (tools.length >= LIST_LIMITS.tools) {
            skipped.set(t.name, `past the first ${LIST_LIMITS.tools} tools`);
            continue;
          }
          const def = definitionOf(t as unknown as Record<string, unknown>);
          // Offered, it would fail every call: forge calls upstream tools as plain requests, not tasks.
          if ((t as { execution?: { taskSupport?: unknown } }).execution?.taskSupport === 'required')
            skipped.set(def.name, 'it may only be called as a task (execution.taskSupport "required"), which forge does not do');
          else if (Buffer.byteLength(def.description ?? '') > LIST_LIMITS.descriptionBytes) skipped.set(def.name, 'description too long');
          else if (byteLength(def.inputSchema) > LIST_LIMITS.schemaBytes || byteLength(def.outputSchema) > LIST_LIMITS.schemaBytes) {
            skipped.set(def.name, 'schema too large');
          } else tools.push(def);
        }
        cursor = res.nextCursor;
        if (!cursor) break;
      }
    } catch (err) {
      return this.#fail(`${this.#label}: tools/list failed: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (this.#conn !== conn) return this.#fail(`${this.#label} ${this.lastError ?? 'closed'}`);
    this.tools = tools;
    this.skipped = skipped;
    return { ok: true, tools };
  }

  /** Calls one tool. Fails (never throws) with `upstream_unavailable`, `timeout`, `cancelled` or `upstream_protocol`. */
  async call(tool: string, args: unknown, options: CallOptions): Promise<CallOutcome | Failure> {
    const conn = await this.ensure(options.signal);
    if (!('client' in conn)) return conn;
    conn.inflight.add(options);
    try {
      const result = await Promise.race([
        conn.client.callTool(
          // The call's trace goes on upstream (OpenTelemetry's MCP conventions: params._meta).
          { name: tool, arguments: (args ?? {}) as Record<string, unknown>, ...traceMeta() },
          {
            signal: options.signal,
            timeout: options.timeoutMs,
            maxTotalTimeout: options.timeoutMs,
            onprogress: options.onEvent
              ? (p) => {
                  const e: ToolEvent = { type: 'progress', progress: p.progress };
                  if (p.total !== undefined) e.total = p.total;
                  if (typeof p.message === 'string') e.message = p.message;
                  options.onEvent?.(e);
                }
              : undefined,
          },
        ),
        conn.died.then((why) => ({ died: why }) as const),
      ]);
      if ('died' in result) {
        return this.#fail(`${this.#label} ${result.died} while "${tool}" was running; the next call restarts it`);
      }
      this.failures = 0;
      return { ok: true, result: result as CallOutcome['result'] };
    } catch (err) {
      if (options.signal.aborted) {
        const timedOut = (options.signal.reason as { name?: string } | undefined)?.name === 'TimeoutError';
        return timedOut
          ? { ok: false, kind: 'timeout', message: `${this.#label}: "${tool}" ran out of its time`, outcome: 'failure' }
          : { ok: false, kind: 'cancelled', message: `${this.#label}: "${tool}" was cancelled by the caller`, outcome: 'none' };
      }
      const code = (err as { code?: unknown }).code;
      if (code === 'REQUEST_TIMEOUT') {
        return {
          ok: false,
          kind: 'timeout',
          message: `${this.#label}: "${tool}" did not answer within ${options.timeoutMs} ms (the upstream was sent notifications/cancelled)`,
          outcome: 'failure',
        };
      }
      if (this.#conn !== conn)
        return this.#fail(`${this.#label} ${this.lastError ?? 'closed'} while "${tool}" was running; the next call restarts it`);
      return this.#fail(`${this.#label}: "${tool}" failed: ${err instanceof Error ? err.message : String(err)}`, 'upstream_protocol');
    } finally {
      conn.inflight.delete(options);
    }
  }

  readonly #digests = new WeakMap<ToolDefinition, string>();
  /** The digest of one listed definition, computed once per listing. */
  digestOf(def: ToolDefinition, digest: (def: ToolDefinition) => string): string {
    let d = this.#digests.get(def);
    if (d === undefined) {
      d = digest(def);
      this.#digests.set(def, d);
    }
    return d;
  }

  /** Stops the connection (and its process); a later `ensure` starts a new one unless `final`. */
  async stop(final = false): Promise<void> {
    if (final) this.#closed = true;
    const conn = this.#conn ?? (this.#starting ? await this.#starting.then((c) => ('client' in c ? c : undefined)) : undefined);
    this.#conn = undefined;
    this.tools = undefined;
    if (!conn) return;
    conn.closing = true;
    this.state = 'stopped';
    await conn.client.close().catch(() => {});
    conn.child?.kill();
    if (conn.child) {
      const exit = await conn.child.exited;
      this.#opts.record('gateway.upstream_exited', { server: this.server.name, phase: 'stopped', reason: exit.reason });
    }
  }
}

/** The parts of a listed tool that a pin covers. */
export function definitionOf(t: Record<string, unknown>): ToolDefinition {
  const def: ToolDefinition = {
    name: String(t.name),
    inputSchema: (t.inputSchema as Record<string, unknown>) ?? { type: 'object' },
  };
  if (typeof t.title === 'string') def.title = t.title;
  if (typeof t.description === 'string') def.description = t.description;
  if (t.outputSchema && typeof t.outputSchema === 'object') def.outputSchema = t.outputSchema as Record<string, unknown>;
  if (t.annotations && typeof t.annotations === 'object') def.annotations = t.annotations as Record<string, unknown>;
  return def;
}

/** `_meta` carrying the active trace context, when a span records; nothing otherwise. */
function traceMeta(): { _meta?: Record<string, string> } {
  const t = injectTrace();
  return t.traceparent ? { _meta: { ...t } as Record<string, string> } : {};
}
