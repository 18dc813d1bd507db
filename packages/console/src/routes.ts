import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import { type ConsoleAccess, SECURITY_HEADERS, send } from './access.js';
import { type AuditIndex, type CallQuery, NotRegularFile, openLogFile } from './audit-index.js';
import type { ConsoleServices } from './services.js';
import type { LogFollower } from './tail.js';
import type { OverviewView } from './views.js';

/** What the API's routes answer from. */
export interface ApiContext {
  services: ConsoleServices;
  index: AuditIndex;
  /** The audit log's directory and base name. */
  dir: string;
  base: string;
  operator: string;
  version: string;
  access: ConsoleAccess;
  follower: LogFollower;
  /** Why the audit log cannot be read as files here (a database's log), if it cannot. */
  auditProblem?: string;
}

/** A JSON answer. */
export function json(res: ServerResponse, status: number, value: unknown): void {
  send(res, status, 'application/json; charset=utf-8', JSON.stringify(value));
}

/** The body of a change: a JSON object, at most 64 KiB; undefined otherwise. */
async function body(req: IncomingMessage): Promise<Record<string, unknown> | undefined> {
  const type = req.headers['content-type'] ?? '';
  if (!type.startsWith('application/json')) return undefined;
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > 65_536) return undefined;
    chunks.push(c);
  }
  try {
    const v = JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** A path segment decoded; a malformed escape stays as written (and then names nothing). */
function decoded(v: string): string {
  try {
    return decodeURIComponent(v);
  } catch {
    return v;
  }
}

const int = (v: string | null): number | undefined => (v !== null && /^[0-9]{1,15}$/.test(v) ? Number(v) : undefined);

const PROPOSAL = /^\/api\/proposals\/([A-Za-z0-9-]{1,64})$/;
const DECISION = /^\/api\/proposals\/([A-Za-z0-9-]{1,64})\/(approve|reject)$/;
const RAW = /^\/api\/audit\/raw\/([^/]+)$/;
const GATEWAY = /^\/api\/gateway\/([A-Za-z0-9_-]{1,64})\/(tools|diff)$/;
const GATEWAY_CHANGE = /^\/api\/gateway\/([A-Za-z0-9_-]{1,64})\/(approve|unpin)$/;
const RUN = /^\/api\/runs\/([A-Za-z0-9_.-]{1,128})$/;
const ARTIFACT = /^\/api\/runs\/([A-Za-z0-9_.-]{1,128})\/(download|tail)\/(.+)$/;

/** The last bytes of an artifact the runs page shows as text. */
const TAIL_BYTES = 8192;

/** The filter of `/api/calls` from its query. */
function callQuery(q: URLSearchParams): CallQuery {
  const cq: CallQuery = {};
  for (const k of ['tool', 'persona', 'outcome'] as const) {
    const v = q.get(k);
    if (v) cq[k] = v;
  }
  for (const k of ['since', 'until', 'before', 'limit'] as const) {
    const v = int(q.get(k));
    if (v !== undefined) cq[k] = v;
  }
  return cq;
}

/** The overview, with the policy's last failed reload read from the audit log (if no reload succeeded since). */
async function overview(c: ApiContext): Promise<OverviewView> {
  const [o, failed, loaded] = await Promise.all([
    c.services.overview(c.operator),
    c.index.entries({ type: 'policy.reload_failed', limit: 1 }),
    c.index.entries({ type: 'policy.reloaded', limit: 1 }),
  ]);
  const bad = failed.rows[0];
  if (!bad || (loaded.rows[0]?.seq ?? 0) > bad.seq) return o;
  let data: Record<string, unknown> = {};
  try {
    data = ((JSON.parse(bad.text) as { data?: unknown }).data ?? {}) as Record<string, unknown>;
  } catch {
    // the page's verifier names a line that does not parse
  }
  const str = (k: string) => (typeof data[k] === 'string' ? { [k]: data[k] as string } : {});
  const num = (k: string) => (typeof data[k] === 'number' ? { [k]: data[k] as number } : {});
  return {
    ...o,
    policy: {
      ...o.policy,
      lastReloadError: {
        seq: bad.seq,
        ts: bad.ts,
        message: typeof data.message === 'string' ? data.message : '(no message)',
        ...str('file'),
        ...num('line'),
        ...num('column'),
        ...str('kept'),
      },
    },
  };
}

/** Answers a GET of the API. */
async function read(c: ApiContext, req: IncomingMessage, res: ServerResponse, url: URL, csrf: string): Promise<void> {
  const path = url.pathname;
  const q = url.searchParams;
  switch (path) {
    case '/api/session':
      return json(res, 200, { operator: c.operator, csrf, version: c.version });
    case '/api/overview':
      return json(res, 200, await overview(c));
    case '/api/doctor':
      return json(res, 200, await c.services.doctor());
    case '/api/policy':
      return json(res, 200, await c.services.policy());
    case '/api/tools':
      return json(res, 200, await c.services.tools());
    case '/api/stats':
      return json(res, 200, await c.index.stats(q.get('window') === 'day' ? 'day' : 'hour', Date.now(), q.get('tool') ?? undefined));
    case '/api/calls':
      return json(res, 200, await c.index.calls(callQuery(q)));
    case '/api/audit/entries': {
      const before = int(q.get('before'));
      const limit = int(q.get('limit'));
      const type = q.get('type');
      const page = await c.index.entries({
        ...(before !== undefined ? { before } : {}),
        ...(limit !== undefined ? { limit } : {}),
        ...(type ? { type } : {}),
      });
      return json(res, 200, { ...page, log: c.base, newest: c.index.size });
    }
    case '/api/audit/files': {
      if (c.auditProblem) return json(res, 409, { ok: false, kind: 'unavailable', message: c.auditProblem });
      const now = await c.services.auditFiles();
      return json(res, 200, { base: now.base, names: now.names, ...(now.publicKey ? { publicKey: now.publicKey } : {}) });
    }
    case '/api/audit/events':
      return c.follower.add(req, res, int(q.get('after')));
    case '/api/proposals':
      return json(res, 200, await c.services.proposals());
    case '/api/gateway':
      return answer(res, await c.services.gatewayServers());
  }
  const gw = GATEWAY.exec(path);
  if (gw)
    return answer(res, gw[2] === 'tools' ? await c.services.gatewayTools(gw[1] as string) : await c.services.gatewayDiff(gw[1] as string));
  const raw = RAW.exec(path);
  if (raw) {
    if (c.auditProblem) return json(res, 409, { ok: false, kind: 'unavailable', message: c.auditProblem });
    return rawFile(res, c.dir, c.base, decoded(raw[1] as string));
  }
  const run = RUN.exec(path);
  if (run) {
    const r = await c.services.run(run[1] as string);
    return json(res, r.ok ? 200 : 404, r);
  }
  const art = ARTIFACT.exec(path);
  if (art) return artifact(c, res, art[1] as string, art[2] as 'download' | 'tail', decoded(art[3] as string));
  const one = PROPOSAL.exec(path);
  if (one) {
    const r = await c.services.proposal(one[1] as string);
    return json(res, r.ok ? 200 : 404, r);
  }
  return json(res, 404, { ok: false, kind: 'not_found', message: `no ${path} here` });
}

/**
 * One artifact: `tail`, its last bytes as text in JSON (the page makes them inert like every
 * answer); `download`, the bytes as an attachment of no type a browser would render (a tool wrote
 * them: an HTML file must never run as this console's page).
 */
async function artifact(c: ApiContext, res: ServerResponse, id: string, how: 'download' | 'tail', path: string): Promise<void> {
  const r = await c.services.artifact(id, path);
  if (!r.ok) return json(res, 404, r);
  if (how === 'tail') {
    const from = Math.max(0, r.bytes.length - TAIL_BYTES);
    return json(res, 200, { path: r.path, size: r.size, from, text: Buffer.from(r.bytes.subarray(from)).toString('utf8') });
  }
  const name = (path.split('/').pop() ?? 'artifact').replace(/[^A-Za-z0-9._-]/g, '_');
  send(res, 200, 'application/octet-stream', r.bytes, {
    'content-disposition': `attachment; filename="${name}"`,
    'content-security-policy': "sandbox; default-src 'none'",
  });
}

/** A service's answer: a refusal as 409 with its reason, anything else as 200. */
function answer(res: ServerResponse, v: unknown): void {
  const refused = v !== null && typeof v === 'object' && !Array.isArray(v) && (v as { ok?: unknown }).ok === false;
  json(res, refused ? 409 : 200, v);
}

/** A string array of at most 1000 names from a body field, or undefined. */
function names(v: unknown): string[] | undefined {
  return Array.isArray(v) && v.length <= 1000 && v.every((x) => typeof x === 'string' && x.length <= 128) ? (v as string[]) : undefined;
}

/** The gateway's changes: pin exactly what was reviewed (tool → digest), or unpin. */
async function gatewayChange(
  c: ApiContext,
  res: ServerResponse,
  server: string,
  what: 'approve' | 'unpin',
  b: Record<string, unknown>,
): Promise<void> {
  if (what === 'unpin') {
    const tools = names(b.tools);
    if (!tools || tools.length === 0)
      return json(res, 400, { ok: false, kind: 'validation_failed', message: 'name the tools to unpin: {"tools": ["…"]}' });
    return answer(res, await c.services.gatewayUnpin(server, tools, c.operator));
  }
  const expect = b.expect;
  const ok =
    expect !== null &&
    typeof expect === 'object' &&
    !Array.isArray(expect) &&
    Object.keys(expect).length > 0 &&
    Object.entries(expect).every(([k, v]) => k.length <= 128 && typeof v === 'string' && /^sha256:[0-9a-f]{64}$/.test(v));
  if (!ok)
    return json(res, 400, {
      ok: false,
      kind: 'validation_failed',
      message: 'an approval names each reviewed tool with the digest shown: {"expect": {"<tool>": "sha256:…"}}',
    });
  // The server's definition is part of what is approved: the page always shows it, so an approval names it.
  const definition = b.definition;
  if (typeof definition !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(definition))
    return json(res, 400, {
      ok: false,
      kind: 'validation_failed',
      message: 'an approval names the server definition digest shown: {"expect": {…}, "definition": "sha256:…"} (reload the gateway page)',
    });
  return answer(
    res,
    await c.services.gatewayApprove(server, { expect: { ...(expect as Record<string, string>) }, definition }, c.operator),
  );
}

/** Answers a POST of the API: the session's CSRF token first, then the change. */
async function change(c: ApiContext, req: IncomingMessage, res: ServerResponse, url: URL, session: { csrf: string }): Promise<void> {
  if (!c.access.csrfHolds(req, session))
    return json(res, 403, {
      ok: false,
      kind: 'csrf',
      message: "a change needs the page's CSRF token (x-forge-csrf); reload the console page",
    });
  const decide = DECISION.exec(url.pathname);
  const gw = GATEWAY_CHANGE.exec(url.pathname);
  if (!decide && !gw) return json(res, 404, { ok: false, kind: 'not_found', message: `no ${url.pathname} to change here` });
  const b = await body(req);
  if (!b)
    return json(res, 400, {
      ok: false,
      kind: 'validation_failed',
      message: 'the body must be a JSON object (content-type application/json, at most 64 KiB)',
    });
  if (gw) return gatewayChange(c, res, gw[1] as string, gw[2] as 'approve' | 'unpin', b);
  if (!decide) return;
  const id = decide[1] as string;
  if (decide[2] === 'approve') {
    const r = await c.services.approve(id, c.operator);
    return json(res, r.ok ? 200 : 409, r);
  }
  const reason = typeof b.reason === 'string' ? b.reason : '';
  if (reason.trim() === '')
    return json(res, 400, { ok: false, kind: 'validation_failed', message: 'a rejection needs a reason: the proposer sees it' });
  const r = await c.services.reject(id, c.operator, reason);
  return json(res, r.ok ? 200 : 409, r);
}

/** Answers a request under `/api/` of a session. */
export async function answerApi(
  c: ApiContext,
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  session: { csrf: string },
): Promise<void> {
  if (req.method === 'GET') return read(c, req, res, url, session.csrf);
  if (req.method === 'POST') return change(c, req, res, url, session);
  res.setHeader('allow', 'GET, POST');
  return json(res, 405, { ok: false, kind: 'method_not_allowed', message: `${req.method} is not used here` });
}

/** One of the log's own files, as bytes: the active segment, a sealed one or the checkpoints; nothing else in its directory. */
async function rawFile(res: ServerResponse, dir: string, base: string, name: string): Promise<void> {
  const ours =
    name === base || name === `${base}.checkpoints` || (name.startsWith(`${base}.`) && /^[0-9]{6,}$/.test(name.slice(base.length + 1)));
  if (!ours) return json(res, 404, { ok: false, kind: 'not_found', message: `${name} is not one of the audit log's files` });
  let fh: Awaited<ReturnType<typeof openLogFile>>;
  try {
    fh = await openLogFile(join(dir, name));
  } catch (err) {
    if (err instanceof NotRegularFile) return json(res, 403, { ok: false, kind: 'policy_denied', message: err.message });
    throw err;
  }
  if (!fh) return json(res, 404, { ok: false, kind: 'not_found', message: `${name} does not exist` });
  // Streamed, as long as it was when opened (an active segment grows meanwhile: whole lines up to here suffice).
  const { size } = await fh.stat();
  res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'application/octet-stream', 'content-length': String(size) });
  if (size === 0) {
    await fh.close();
    res.end();
    return;
  }
  const stream = fh.createReadStream({ start: 0, end: size - 1, autoClose: true });
  await new Promise<void>((resolve) => {
    stream.on('error', () => {
      res.destroy();
      resolve();
    });
    stream.on('close', resolve);
    stream.pipe(res);
  });
}
