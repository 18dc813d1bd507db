import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { JobQueue } from '@forge/queue';
import type { Forge, Refusal } from '@forge/runner';
import type { Toolsmith } from '@forge/toolsmith';
import { EnvironmentError, envFromFlags, parseListen, parseTokens, UsageError } from '../args.js';
import type { Command } from '../command.js';
import { callContext, type Engine, openForge } from '../context.js';
import type { Output } from '../output.js';
import { keepPresent, sandboxFacts } from '../presence.js';
import { untilSignal } from '../signals.js';
import { openStore } from '../store.js';
import type { KeptToolDir } from '../tool-dir-keeper.js';
import type { PeriodicCycle } from '../toolsmith-cycle.js';
import { VERSION } from '../version.js';
import type { Where } from '../where.js';
import { operator } from './toolsmith.js';

/** What a refused or killed call is told: "forge is shutting down (SIGTERM)". */
const shutdownReason = (signal: string): string => `forge is shutting down (${signal})`;

export const serve: Command = {
  words: 'serve',
  usage:
    'forge serve [--http [host:]port] [--token TOKEN=persona[:tools] ...] [--audit-reader PERSONA ...] [--allow-origin O ...] [--max-sessions N] [--max-sessions-per-principal N] [--session-idle-ms N] [--grace-ms N] [--workers N | --dispatch] [--store URL] [--max-message-bytes N] [--tool-dir DIR] [--console PORT [--as NAME]]',
  summary: 'serve MCP on stdio (default) or Streamable HTTP; stops on EOF, SIGTERM or SIGINT',
  details: [
    '--http [host:]port   Streamable HTTP instead of stdio (host default 127.0.0.1)',
    '--token T=persona    a bearer token and the persona it serves (repeat; required off loopback);',
    '                     T=persona:a,b also limits that token to tools a and b',
    '--audit-reader P     the tokens of persona P may read the audit log’s tree at /audit/log/ (a',
    '                     monitor’s, a witness’s; repeat); with tokens no other persona may',
    '--allow-origin O     a browser Origin allowed besides loopback ones (repeat)',
    '--max-sessions N     most HTTP sessions open at once (default 256); past it: 503',
    '--max-sessions-per-principal N',
    '                     most sessions one token holds (without tokens: the one loopback caller);',
    '                     default: an even share of --max-sessions among the tokens; past it: 429',
    '                     naming the cap; DELETE a session or let one idle out to free a slot',
    '--session-idle-ms N  a session with nothing open this long is closed (default 1800000)',
    '--grace-ms N         how long calls in flight may finish at shutdown (default 10000); then their',
    '                     tools are killed and they are answered (kind cancelled) and audited',
    "--workers N          run forged tools' calls in N `forge worker` processes through the project's",
    '                     job queue (<project>/.forge/queue) instead of in this process; a worker',
    '                     that dies is restarted and its calls are delivered again (default: none)',
    "--dispatch           hand forged tools' calls to the workers on the job queue without starting",
    '                     any (`forge worker` on this host, or on others with --store postgres://…)',
    '--max-message-bytes N',
    '                     largest protocol message: a stdio line, an HTTP body (default 16777216,',
    '                     16 MiB; at most 268435456). A longer stdio line is answered with a JSON-RPC',
    '                     error naming the limit and the session goes on; a longer HTTP body gets 413',
    '--tool-dir DIR       keep DIR a tool directory of the tools the served persona sees, as',
    '                     forge tools export DIR --watch does, for as long as the server runs',
    '--console PORT       also serve the operator console (forge console) on 127.0.0.1:PORT (0: a free',
    "                     port) over this server's engine; its address, with the launch token, goes",
    '                     to stderr. --as NAME: who the console acts as (default $FORGE_OPERATOR,',
    '                     else the login name)',
    'On stdio nothing but protocol goes to stdout; logs go to stderr.',
  ],
  options: {
    http: { type: 'string' },
    token: { type: 'string', multiple: true },
    'audit-reader': { type: 'string', multiple: true },
    'allow-origin': { type: 'string', multiple: true },
    'grace-ms': { type: 'string' },
    workers: { type: 'string' },
    dispatch: { type: 'boolean' },
    'max-message-bytes': { type: 'string' },
    'max-sessions': { type: 'string' },
    'max-sessions-per-principal': { type: 'string' },
    'session-idle-ms': { type: 'string' },
    'tool-dir': { type: 'string' },
    console: { type: 'string' },
    as: { type: 'string' },
  },
  async run({ values }, { out, where, cliPath }) {
    const listen = typeof values.http === 'string' ? parseListen(values.http) : undefined;
    const tokenArgs = (values.token as string[] | undefined) ?? [];
    if (tokenArgs.length > 0 && !listen)
      throw new UsageError('--token applies to --http only (stdio has one client: its parent)', this.usage);
    const tokens = parseTokens(tokenArgs);
    const auditReaders = (values['audit-reader'] as string[] | undefined) ?? [];
    const personas = new Set(Object.values(tokens).map((g) => g.persona));
    for (const p of auditReaders)
      if (!personas.has(p))
        throw new UsageError(
          `--audit-reader ${p}: no --token serves persona "${p}" (without tokens the loopback caller reads the tree already)`,
          this.usage,
        );
    const origins = (values['allow-origin'] as string[] | undefined) ?? [];
    const graceMs = values['grace-ms'] === undefined ? 10_000 : Number(values['grace-ms']);
    if (!Number.isInteger(graceMs) || graceMs < 0)
      throw new UsageError(`--grace-ms expects milliseconds (got "${String(values['grace-ms'])}")`, this.usage);
    const maxMessageBytes = parseMaxMessageBytes(values['max-message-bytes'], this.usage);
    const workers = values.workers === undefined ? 0 : Number(values.workers);
    const dispatch = values.dispatch === true;
    if (typeof values.workers === 'string' && (!/^\d+$/.test(values.workers) || workers < 1 || workers > 256))
      throw new UsageError(`--workers expects a number of worker processes from 1 to 256 (got "${values.workers}")`, this.usage);
    const limits: { maxSessions?: number; maxSessionsPerPrincipal?: number; sessionIdleMs?: number } = {};
    for (const [flag, key] of [
      ['max-sessions', 'maxSessions'],
      ['max-sessions-per-principal', 'maxSessionsPerPrincipal'],
      ['session-idle-ms', 'sessionIdleMs'],
    ] as const) {
      const v = values[flag];
      if (v === undefined) continue;
      if (!listen) throw new UsageError(`--${flag} applies to --http only (stdio has one session)`, this.usage);
      const n = Number(v);
      if (typeof v !== 'string' || !/^\d+$/.test(v) || !Number.isSafeInteger(n) || n < 1)
        throw new UsageError(`--${flag} expects a positive integer (got "${String(v)}")`, this.usage);
      limits[key] = n;
    }
    if (limits.maxSessionsPerPrincipal !== undefined && limits.maxSessionsPerPrincipal > (limits.maxSessions ?? 256))
      throw new UsageError(
        `--max-sessions-per-principal ${limits.maxSessionsPerPrincipal} is above --max-sessions ${limits.maxSessions ?? '(default 256)'}: lower it, or raise --max-sessions`,
        this.usage,
      );

    const consolePort = parseConsolePort(values, this.usage);
    const toolDir = typeof values['tool-dir'] === 'string' ? resolve(values['tool-dir']) : undefined;
    let failed = false;
    let con: { close(): Promise<void> } | undefined;
    const stop = untilSignal();
    /** Says on stderr that the shutdown began (tests and operators wait for it); returns its reason. */
    const stopping = (signal: string): string => {
      out.note(
        `forge: ${signal}: shutting down; new calls are refused, calls in flight have ${graceMs} ms to finish, then their tools are killed`,
      );
      return shutdownReason(signal);
    };
    try {
      if (listen) {
        // Nothing to answer before the engine is open: open it while the MCP library loads.
        const w = await where();
        const [mcp, served] = await Promise.all([import('@forge/mcp'), openServed(w, { workers, dispatch, graceMs, cliPath, out })]);
        const { engine } = served;
        const { forge } = engine;
        let kept: KeptToolDir | undefined;
        try {
          kept = await keepDir(forge, w, toolDir, cliPath, out);
          con = await serveConsole(w, served, consolePort, values, out);
          let http: Awaited<ReturnType<typeof mcp.serveHttp>>;
          try {
            http = await mcp.serveHttp(forge, {
              ...listen,
              ...(tokenArgs.length ? { tokens } : {}),
              ...(auditReaders.length ? { auditReaders } : {}),
              ...(origins.length ? { allowedOrigins: origins } : {}),
              ...limits,
              ...(maxMessageBytes !== undefined ? { maxBodyBytes: maxMessageBytes } : {}),
              graceMs,
              name: 'forge',
              version: VERSION,
              toolsmith: engine.toolsmith,
              ...(served.auditTree ? { auditTree: served.auditTree } : {}),
            });
          } catch (err) {
            throw new EnvironmentError(`cannot serve on ${values.http}: ${(err as Error).message}`);
          }
          if (out.json) out.data({ url: http.url, project: w.project, home: w.home });
          out.note(`forge ${VERSION}: MCP over Streamable HTTP at ${http.url} (project ${w.project}); Ctrl-C stops`);
          const cycle = await periodicCycle(engine, out);
          try {
            await http.close({ reason: stopping(await stop.promise) });
          } finally {
            await cycle.stop();
          }
        } finally {
          await con?.close();
          await kept?.stop();
          await served.close();
        }
      } else {
        // The protocol comes up first and answers initialize while the engine opens (home,
        // project, audit log, registries, watchers); requests wait for it. An engine that cannot
        // open closes the session and exits 2, as before any answer.
        const mcp = await import('@forge/mcp');
        let engineOpened: Engine | undefined;
        const opening = where().then(async (w) => {
          const served = await openServed(w, { workers, dispatch, graceMs, cliPath, out });
          engineOpened = served.engine;
          return { w, engine: served.engine, served };
        });
        const stdio = await mcp.serveStdio(
          opening.then((o) => o.engine.forge),
          {
            ctx: callContext(envFromFlags(values)),
            graceMs,
            ...(maxMessageBytes !== undefined ? { maxMessageBytes } : {}),
            name: 'forge',
            version: VERSION,
            toolsmith: lateToolsmith(() => engineOpened?.toolsmith),
          },
        );
        let opened: Awaited<typeof opening>;
        try {
          opened = await opening;
        } catch (err) {
          await stdio.close();
          throw err;
        }
        const cycle = await periodicCycle(opened.engine, out);
        let kept: KeptToolDir | undefined;
        try {
          kept = await keepDir(opened.engine.forge, opened.w, toolDir, cliPath, out);
          con = await serveConsole(opened.w, opened.served, consolePort, values, out);
          out.note(`forge ${VERSION}: MCP on stdio (project ${opened.w.project}, home ${opened.w.home})`);
          await Promise.race([stdio.closed, stop.promise.then((signal) => stdio.close({ reason: stopping(signal) }))]);
          // Input that ended inside an oversized line: the session could not go on (exit 1, why on stderr).
          if (stdio.failure) {
            out.note(`forge: ${stdio.failure.message}`);
            failed = true;
          }
        } finally {
          await con?.close();
          await kept?.stop();
          await cycle.stop();
          await opened.served.close();
        }
      }
    } finally {
      stop.dispose();
    }
    return failed ? 1 : 0;
  },
};

/** With `--tool-dir`, the directory kept for the served persona (its reports on stderr: stdout may be the protocol's). */
async function keepDir(forge: Forge, w: Where, dir: string | undefined, cliPath: string, out: Output): Promise<KeptToolDir | undefined> {
  if (!dir) return undefined;
  const { keepToolDir, exportSummary } = await import('../tool-dir-keeper.js');
  return keepToolDir(forge, w, dir, cliPath, {
    report: (r) => {
      out.note(`forge: tool directory ${exportSummary(r)}`);
      for (const s of r.skipped) out.note(`forge: ${s.name} left out of ${r.dir}: ${s.why}`);
    },
    note: (m) => out.note(m),
  });
}

/**
 * The engine a server serves over the store this invocation names and, with `--workers N` or
 * `--dispatch`, the queue it hands forged tools' calls to (and, with `--workers N`, the worker
 * processes it runs). `close` goes in that order: the engine (its calls in flight get their
 * answers from the workers), then the workers, then presence and the store.
 */
async function openServed(w: Where, o: { workers: number; dispatch: boolean; graceMs: number; cliPath: string; out: Output }) {
  const { workers, graceMs, out } = o;
  const store = await openStore(w);
  let present: { stop(): Promise<void> } | undefined;
  let engine: Engine;
  let queue: JobQueue | undefined;
  try {
    queue = workers > 0 || o.dispatch ? await store.queue() : undefined;
    // Serving alone creates no project state: a server of one host's files that hands nothing
    // to workers says it is alive only where the project has a .forge/ already.
    // Loaded here, not at the CLI's start: a command that serves nothing never loads the sandbox.
    const { prebuiltStats } = await import('@forge/sandbox');
    if (store.kind !== 'files' || queue || existsSync(join(w.project, '.forge')))
      present = keepPresent(
        await store.presence(),
        {
          name: `serve-${process.pid}`,
          kind: 'front-end',
          facts: () => ({ workers, store: store.kind, ...sandboxFacts(prebuiltStats()) }),
        },
        (l) => out.note(l),
      );
    engine = await openForge(w, { server: true, store, ...(queue ? { dispatch: queue } : {}) });
  } catch (err) {
    await present?.stop();
    await store.close().catch(() => {});
    throw err;
  }
  // Loaded here (child_process with it): a command that serves nothing never loads it.
  const pool =
    workers > 0
      ? (await import('../workers.js')).startWorkers(workers, w, { cliPath: o.cliPath, graceMs, note: (l) => out.note(l) })
      : undefined;
  if (queue)
    out.note(
      `forge serve: forged tools' calls go to ${workers > 0 ? `${workers} worker(s) of this server and any other worker` : 'the workers'} on the job queue ${queue.where}`,
    );
  return {
    engine,
    store,
    /** The tree served under /audit/log/ when the log is a database's (undefined: the file log's tiles). */
    auditTree: store.auditTree?.(),
    async close() {
      try {
        await engine.close({ graceMs });
      } finally {
        await pool?.stop();
        await present?.stop();
        await store.close();
      }
    },
  };
}

/**
 * The toolsmith of an engine still opening, for the stdio server (which answers initialize
 * first). Calls wait for the engine anyway, so they find it open; a status asked before it is
 * open (the initialize instructions) says "paused" until it is: nothing is offered early.
 */
function lateToolsmith(get: () => Toolsmith | undefined): Pick<Toolsmith, 'status' | 'request' | 'propose' | 'show' | 'approve'> {
  const opening = (): Refusal => ({ ok: false, kind: 'unavailable', message: 'forge is still opening; call again' });
  return {
    status: (persona) =>
      get()?.status(persona) ?? {
        enabled: false,
        paused: true,
        pausedWhy: 'forge is still opening',
        mode: 'direct',
        approvesInClient: false,
      },
    request: async (args, ctx) => (await get()?.request(args, ctx)) ?? opening(),
    propose: async (args, ctx) => (await get()?.propose(args, ctx)) ?? opening(),
    show: async (id) => (await get()?.show(id)) ?? opening(),
    approve: async (id, op) => (await get()?.approve(id, op)) ?? opening(),
  };
}

/** The toolsmith's periodic cycle of a server (its findings on stderr: stdout is the protocol's). */
async function periodicCycle(engine: Engine, out: Output): Promise<PeriodicCycle> {
  const { startPeriodicCycle } = await import('../toolsmith-cycle.js');
  return startPeriodicCycle({ forge: engine.forge, toolsmith: engine.toolsmith, note: (l) => out.note(l) });
}

/** `--console PORT`: 0 (a free port) to 65535; undefined without the flag (and then no `--as`). */
function parseConsolePort(values: Record<string, unknown>, usage: string): number | undefined {
  const v = values.console;
  if (v === undefined) {
    if (values.as !== undefined) throw new UsageError("--as names the console's operator: it goes with --console PORT", usage);
    return undefined;
  }
  if (typeof v !== 'string' || !/^[0-9]{1,5}$/.test(v) || Number(v) > 65535)
    throw new UsageError(`--console expects a port from 0 (a free one) to 65535 (got "${String(v)}")`, usage);
  return Number(v);
}

/** With `--console PORT`, the operator console over this server's engine and store; its address goes to stderr. */
async function serveConsole(
  w: Where,
  served: Awaited<ReturnType<typeof openServed>>,
  port: number | undefined,
  values: Record<string, unknown>,
  out: Output,
): Promise<{ close(): Promise<void> } | undefined> {
  if (port === undefined) return undefined;
  const as = operator(values, w.env);
  if (!as) throw new UsageError('no operator name for the console: give --as NAME or set FORGE_OPERATOR');
  const [{ startConsole }, { consoleServices }] = await Promise.all([import('@forge/console'), import('../console-services.js')]);
  const con = await startConsole({
    services: consoleServices(w, served.engine, served.store, VERSION),
    operator: as,
    port,
    version: VERSION,
  }).catch((err: Error) => {
    throw new EnvironmentError(`cannot serve the console: ${err.message}`);
  });
  out.note(`forge console for ${as}: open ${con.url} (the address carries this launch's token: keep it to yourself)`);
  return con;
}

/** `--max-message-bytes`: a whole number of bytes from 1 to 256 MiB (what one string can hold, with room). */
function parseMaxMessageBytes(v: unknown, usage: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (typeof v !== 'string' || !/^\d+$/.test(v) || !Number.isSafeInteger(n) || n < 1 || n > 268_435_456)
    throw new UsageError(`--max-message-bytes expects a whole number of bytes from 1 to 268435456 (got "${String(v)}")`, usage);
  return n;
}
