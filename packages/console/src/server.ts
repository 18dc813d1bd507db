import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { assertToken, ConsoleAccess, send } from './access.js';
import { AuditIndex } from './audit-index.js';
import { type ApiContext, answerApi, json } from './routes.js';
import type { ConsoleServices } from './services.js';
import { LogFollower } from './tail.js';

/** How to start a console. */
export interface ConsoleOptions {
  services: ConsoleServices;
  /** Who the console acts as: the name approvals are made under (policy `toolsmith.approvers` must list it). */
  operator: string;
  /** A loopback address (default 127.0.0.1); any other is refused. */
  host?: string;
  /** Default 0: a free port. */
  port?: number;
  /** The launch token (default: a new random one). */
  token?: string;
  /** forge's version, shown on the overview. */
  version?: string;
  /** Where the built page is (default: this package's `dist/web`). */
  assets?: string;
}

/** A running console. */
export interface Console {
  /** The address to open: it carries the launch token. Print it once, to the person who started the console. */
  readonly url: string;
  /** The origin, without the token. */
  readonly origin: string;
  close(): Promise<void>;
}

/** A console refused before it listened. */
export class ConsoleError extends Error {
  override readonly name = 'ConsoleError';
  constructor(
    readonly code: 'not_loopback' | 'listen_failed' | 'assets_missing',
    message: string,
  ) {
    super(message);
  }
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.html': 'text/html; charset=utf-8',
  '.svg': 'image/svg+xml',
};

/** The page's files, read once at start. */
async function loadAssets(dir: string): Promise<Map<string, { type: string; body: Buffer }>> {
  const out = new Map<string, { type: string; body: Buffer }>();
  for (const name of ['index.html', 'app.js', 'app.css']) {
    let body: Buffer;
    try {
      body = await readFile(join(dir, name));
    } catch {
      throw new ConsoleError('assets_missing', `the console's page is not built (${join(dir, name)} is missing): run pnpm build`);
    }
    out.set(name, { type: TYPES[name.slice(name.lastIndexOf('.'))] as string, body });
  }
  return out;
}

/**
 * Starts the operator console on a loopback address: the page (built into `dist/web`, every
 * script and style from this server) and its API, behind the rules of `access.ts`. Resolves once
 * listening.
 */
export async function startConsole(options: ConsoleOptions): Promise<Console> {
  const host = options.host ?? '127.0.0.1';
  if (!LOOPBACK.has(host))
    throw new ConsoleError(
      'not_loopback',
      `the console listens on loopback only (127.0.0.1, ::1, localhost), not ${host}: it approves tools; reach it from another machine through an SSH tunnel (ssh -L)`,
    );
  // Checked before anything listens.
  if (options.token !== undefined) assertToken(options.token);
  const assets = await loadAssets(options.assets ?? fileURLToPath(new URL('./web/', import.meta.url)));
  const services = options.services;
  // A forge whose log is not a file log (a database's) has no audit page here, and says why; the rest works.
  let files: { dir: string; base: string };
  let auditProblem: string | undefined;
  try {
    files = await services.auditFiles();
  } catch (err) {
    auditProblem = (err as Error).message;
    files = { dir: '', base: 'forge.log' };
  }
  const index = new AuditIndex(files.dir, files.base, { readable: auditProblem === undefined });
  await index.refresh();

  const follower = new LogFollower(index, files.dir);
  let access: ConsoleAccess;
  const ctx = (): ApiContext => ({
    ...(auditProblem !== undefined ? { auditProblem } : {}),
    services,
    index,
    dir: files.dir,
    base: files.base,
    operator: options.operator,
    version: options.version ?? '',
    access,
    follower,
  });

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const denied = access.checkRequest(req);
    if (denied) return send(res, denied.status, 'text/plain; charset=utf-8', `${denied.message}\n`);
    const url = new URL(req.url ?? '/', 'http://console.invalid');
    const given = url.searchParams.get('token');
    if (given !== null && req.method === 'GET' && url.pathname === '/') {
      const cookie = access.exchange(given);
      if (!cookie)
        return send(
          res,
          401,
          'text/plain; charset=utf-8',
          "that console token is not this launch's: open the address forge console printed last\n",
        );
      return send(res, 303, 'text/plain; charset=utf-8', '', { location: '/', 'set-cookie': cookie });
    }
    const session = access.session(req);
    if (!session) {
      const message = 'open the console at the address forge console printed (it carries the token that lets this browser in)';
      if (url.pathname.startsWith('/api/')) return json(res, 401, { ok: false, kind: 'unauthenticated', message });
      return send(res, 401, 'text/plain; charset=utf-8', `${message}\n`);
    }
    if (url.pathname.startsWith('/api/')) return answerApi(ctx(), req, res, url, session);
    if (req.method !== 'GET' && req.method !== 'HEAD')
      return send(res, 405, 'text/plain; charset=utf-8', 'only GET here\n', { allow: 'GET' });
    const name = url.pathname === '/' ? 'index.html' : url.pathname.startsWith('/assets/') ? url.pathname.slice(8) : '';
    const asset = assets.get(name);
    if (!asset) return send(res, 404, 'text/plain; charset=utf-8', `no ${url.pathname} here\n`);
    return send(res, 200, asset.type, asset.body);
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err: Error) => {
      if (res.headersSent) return void res.destroy();
      json(res, 500, { ok: false, kind: 'internal', message: `the console failed to answer: ${err.message}` });
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(new ConsoleError('listen_failed', `cannot listen on ${host}:${options.port ?? 0}: ${err.code ?? err.message}`)),
    );
    server.listen({ host, port: options.port ?? 0 }, resolve);
  });
  const port = (server.address() as AddressInfo).port;
  access = new ConsoleAccess(port, options.token);
  const origin = `http://${host === '::1' ? '[::1]' : host}:${port}`;
  return {
    url: `${origin}/?token=${access.launchToken}`,
    origin,
    async close() {
      follower.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
