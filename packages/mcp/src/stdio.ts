import type { Readable, Writable } from 'node:stream';
import type { CallContext, Forge } from '@forge/runner';
import { ForgeMcpError } from './errors.js';
import { Inflight } from './inflight.js';
import { DEFAULT_MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES_CEILING } from './jsonrpc.js';
import { type BuiltServer, buildServer, type ProtocolEra } from './server.js';
import { BoundedStdioTransport } from './stdioTransport.js';
import { TaskStore } from './tasks.js';
import type { ToolsmithSurface } from './toolsmithTools.js';

/** Options of {@link serveStdio}. */
export interface ServeStdioOptions {
  /** The client's context (default: the Forge's environment: FORGE_PERSONA, FORGE_SESSION_ID, …). */
  ctx?: CallContext;
  /** How long close() (or EOF) lets calls in flight finish before their sandboxes are killed (default 10 s). */
  graceMs?: number;
  /** Default `process.stdin`. */
  stdin?: Readable;
  /** Default `process.stdout`. */
  stdout?: Writable;
  /**
   * Largest message line in bytes, without its newline (default 16 MiB, at most 256 MiB). A longer
   * line is discarded as it streams, never held, and answered with JSON-RPC -32600 naming the
   * limit; the session goes on at the next newline. Input that ends inside one ends the session
   * with {@link StdioServerHandle.failure} set.
   */
  maxMessageBytes?: number;
  /** Server name and version in the initialize answer. */
  name?: string;
  version?: string;
  /** The project's toolsmith: `forge_request` and `forge_propose` (see `ForgeMcpServerOptions.toolsmith`). */
  toolsmith?: ToolsmithSurface;
}

/** A running stdio server. */
export interface StdioServerHandle {
  /** Resolves once the server stopped: stdin ended (EOF) or close() was called, and calls in flight answered. */
  closed: Promise<void>;
  /**
   * Why the session could not go on, once `closed` resolved: `message_too_large` when stdin ended
   * inside a line over `maxMessageBytes` (the message is the reason to print; exit non-zero).
   * Undefined after a clean EOF or close().
   */
  readonly failure: ForgeMcpError | undefined;
  /**
   * Refuses new calls, lets calls in flight finish within the grace period, then has the runner
   * kill those still running; closes the transport once every call was answered.
   * @param options.reason why, as the refusals and the answers of killed calls say it (default
   *   `the forge server is shutting down`; `forge serve` says `forge is shutting down (SIGTERM)`)
   */
  close(options?: { reason?: string }): Promise<void>;
}

/**
 * Serves one MCP client on stdin/stdout until EOF or close(). Nothing but protocol messages is
 * written to stdout: while it serves `process.stdout`, `console.log`, `console.info` and
 * `console.debug` go to stderr. The Forge is not closed: after `closed` resolves, the caller
 * closes it (`forge.close({ graceMs })`) and exits.
 *
 * `forge` may be a promise of the engine still opening, so `initialize` is answered while it
 * opens (see {@link createForgeMcpServer}); if it fails, close this server and report why.
 *
 * @throws ForgeMcpError `invalid_options` for a `maxMessageBytes` that is not a whole number of
 *   bytes from 1 to 256 MiB.
 */
export async function serveStdio(forge: Forge | PromiseLike<Forge>, options: ServeStdioOptions = {}): Promise<StdioServerHandle> {
  // An engine that fails to open is reported to each request (buildServer); the instances that
  // hear of it are built on the first message, so the failure is marked handled here, at once.
  if (typeof (forge as PromiseLike<Forge>).then === 'function') Promise.resolve(forge).catch(() => {});
  const stdin = options.stdin ?? process.stdin;
  const stdout = options.stdout ?? process.stdout;
  const inflight = new Inflight();
  const transport = new BoundedStdioTransport(stdin, stdout, maxMessageBytes(options.maxMessageBytes));
  const restoreConsole = stdout === process.stdout ? consoleToStderr() : () => {};
  // The instances the SDK's entry built for this connection (a 2026 probe may be discarded for a 2025 opening).
  const built = new Set<BuiltServer>();
  // The connection's tasks (2026 era): one client, so one owner.
  const tasks = new TaskStore();
  const factory = ({ era }: { era: ProtocolEra }) => {
    const b = buildServer(
      forge,
      { ...(options.ctx ? { ctx: options.ctx } : {}), ...pick(options), era, tasks: { store: tasks, owner: 'stdio' } },
      inflight,
    );
    built.add(b);
    const onclose = b.server.onclose;
    b.server.onclose = () => {
      b.dispose();
      built.delete(b);
      onclose?.();
    };
    return b.server;
  };

  let markClosed!: () => void;
  const closed = new Promise<void>((resolve) => {
    markClosed = resolve;
  });
  let closing: Promise<void> | undefined;
  let entry: { close(): Promise<void> } | undefined;
  const close = (o: { reason?: string } = {}): Promise<void> => {
    closing ??= (async () => {
      stdin.off('end', onEnd);
      stdout.off('error', onGone);
      // Answers still go out on stdout after stdin ended; the transport closes after them.
      await inflight.drain(options.graceMs ?? 10_000, o.reason);
      for (const b of built) b.dispose();
      await entry?.close().catch(() => {});
      await transport.close();
      restoreConsole();
      markClosed();
    })();
    return closing;
  };
  const onEnd = () => void close({ reason: 'forge is shutting down (its client closed stdin)' });
  stdin.once('end', onEnd);
  // A client that went away (EPIPE) ends the session like EOF.
  const onGone = () => void close({ reason: 'forge is shutting down (its client stopped reading stdout)' });
  stdout.on('error', onGone);
  // The SDK's entry closes the transport when the connection ends: so does this server.
  const closeTransport = transport.close.bind(transport);
  transport.close = async () => {
    await closeTransport();
    void close();
  };
  // Both eras on one connection: the opening message decides (initialize: 2025; a request with the
  // 2026 envelope, or server/discover: 2026-07-28).
  const { serveStdio: serve } = await import('@modelcontextprotocol/server/stdio');
  entry = serve(factory, {
    transport,
    legacy: 'serve',
    onerror: (err) => {
      if (process.env.FORGE_MCP_DEBUG) process.emitWarning(`forge mcp: ${err.message}`);
    },
  });
  return {
    closed,
    close,
    get failure() {
      return transport.failure;
    },
  };
}

function maxMessageBytes(n: number | undefined): number {
  if (n === undefined) return DEFAULT_MAX_MESSAGE_BYTES;
  if (!Number.isSafeInteger(n) || n < 1 || n > MAX_MESSAGE_BYTES_CEILING)
    throw new ForgeMcpError(
      'invalid_options',
      `maxMessageBytes must be a whole number of bytes from 1 to ${MAX_MESSAGE_BYTES_CEILING} (got ${n})`,
    );
  return n;
}

function pick(o: ServeStdioOptions): { name?: string; version?: string; toolsmith?: ToolsmithSurface } {
  return {
    ...(o.name ? { name: o.name } : {}),
    ...(o.version ? { version: o.version } : {}),
    ...(o.toolsmith ? { toolsmith: o.toolsmith } : {}),
  };
}

/** Sends console output meant for stdout to stderr; returns the undo. */
function consoleToStderr(): () => void {
  const saved = { log: console.log, info: console.info, debug: console.debug };
  console.log = console.info = console.debug = (...args: unknown[]) => console.error(...args);
  return () => Object.assign(console, saved);
}
