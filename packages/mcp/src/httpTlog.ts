/**
 * The audit log's Merkle tree served read-only beside the MCP endpoint, so a monitor or a witness
 * can follow the log (C2SP tlog-tiles, SPEC.md section 9.4 of @forge/audit-chain):
 *
 *   GET /audit/log/checkpoint                 the newest signed tree checkpoint (text/plain)
 *   GET /audit/log/tile/<L>/<N>[.p/<W>]       a tile: its hashes (application/octet-stream)
 *
 * The tree is the file log's (its tiles beside it) or, for a database store, the one it keeps
 * (an {@link AuditTreeSource}). Only hashes and the signed head are served: the entries themselves (C2SP's entry bundles) are
 * forge's record of every persona's calls and are not. A request passes the same Host, Origin and
 * token checks as /mcp. A path is taken only in its canonical spelling, and a file only when it
 * is a regular file inside the log's tree directory (never through a link).
 */
import { constants as fsc } from 'node:fs';
import { lstat, open, realpath } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { dirname, join, sep } from 'node:path';

/** Where the tree is served. */
export const TLOG_PREFIX = '/audit/log/';

/** The largest file served: a full tile (256 hashes); a checkpoint note is far smaller. */
const MAX_BYTES = 256 * 32;

const TILE_RE = /^tile\/(0|[1-9][0-9]?)\/((?:x[0-9]{3}\/)*[0-9]{3})(?:\.p\/([1-9][0-9]{0,2}))?$/;

/**
 * Where the tree is read from when it is not the file log's tiles beside it: a database's
 * (`postgresTiles` of @forge/postgres has this shape). `tile` gives the first `width` hashes of a
 * tile, or undefined when it does not hold that many yet.
 */
export interface AuditTreeSource {
  checkpoint(): Promise<string | undefined>;
  tile(level: number, index: number, width: number): Promise<Uint8Array | undefined>;
}

/** What a request path names, when it names a checkpoint or a tile in canonical form. */
export function tlogFile(
  rel: string,
): { file: string; immutable: boolean; type: string; tile?: { level: number; index: number; width: number } } | undefined {
  if (rel === 'checkpoint') return { file: 'checkpoint', immutable: false, type: 'text/plain; charset=utf-8' };
  const m = TILE_RE.exec(rel);
  if (!m) return undefined;
  const groups = (m[2] as string).split('/');
  // x-prefixed groups are the high ones: no leading group of zeros (x000/…), as tilePath writes.
  if (groups.length > 1 && groups[0] === 'x000') return undefined;
  if (m[3] !== undefined && Number(m[3]) > 255) return undefined;
  const index = Number(groups.map((g) => g.replace('x', '')).join(''));
  if (!Number.isSafeInteger(index)) return undefined;
  const tile = { level: Number(m[1]), index, width: m[3] === undefined ? 256 : Number(m[3]) };
  return { file: rel, immutable: m[3] === undefined, type: 'application/octet-stream', tile };
}

/** Answers one request under {@link TLOG_PREFIX} from the tree of the file log at `log`, or from `source`. */
export async function serveTlog(log: string | AuditTreeSource, path: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const text = (status: number, message: string, headers: Record<string, string> = {}) =>
    void res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', ...headers }).end(`${message}\n`);
  if (req.method !== 'GET' && req.method !== 'HEAD')
    return text(405, `${req.method} is not served here: the audit log's tree is read-only (GET)`, { allow: 'GET, HEAD' });
  const rel = path.slice(TLOG_PREFIX.length);
  const target = tlogFile(rel);
  if (!target)
    return text(404, `not found: ${TLOG_PREFIX}checkpoint and ${TLOG_PREFIX}tile/<L>/<N>[.p/<W>] (C2SP tlog-tiles paths) are served`);
  if (typeof log !== 'string') {
    const { tile } = target;
    let data: Uint8Array | string | undefined;
    try {
      data = tile ? await log.tile(tile.level, tile.index, tile.width) : await log.checkpoint();
    } catch {
      return text(503, 'the audit log’s tree cannot be read from its store now; try again');
    }
    if (data === undefined || (tile && data.length !== tile.width * 32)) return text(404, `not found: ${rel}`);
    return send(res, req, target, typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data));
  }
  const root = `${log}.tlog`;
  let realRoot: string;
  try {
    // The tree's directory itself, not what a link in its place points to.
    if ((await lstat(root)).isSymbolicLink()) throw new Error('a link');
    realRoot = await realpath(root);
  } catch {
    return text(404, `no tree beside the audit log (${root}): forge writes it as the log grows, when the log is a file on this host`);
  }
  // A partial tile gone because its tile filled since is the full tile's first hashes (C2SP tlog-tiles).
  const partial = /^(.*)\.p\/([0-9]+)$/.exec(target.file);
  const data =
    (await readInside(realRoot, join(root, target.file))) ??
    (partial ? (await readInside(realRoot, join(root, partial[1] as string)))?.subarray(0, Number(partial[2]) * 32) : undefined);
  if (!data || (partial && data.length !== Number(partial[2]) * 32)) return text(404, `not found: ${rel}`);
  send(res, req, target, data);
}

function send(res: ServerResponse, req: IncomingMessage, target: { type: string; immutable: boolean }, data: Buffer): void {
  res.writeHead(200, {
    'content-type': target.type,
    'content-length': String(data.length),
    'cache-control': target.immutable ? 'public, max-age=31536000, immutable' : 'no-cache',
    'x-content-type-options': 'nosniff',
  });
  res.end(req.method === 'HEAD' ? undefined : data);
}

/** The bytes of `file` when it is a regular file of at most a tile's size inside `realRoot` (no link followed); else undefined. */
async function readInside(realRoot: string, file: string): Promise<Buffer | undefined> {
  try {
    const realDir = await realpath(dirname(file));
    if (realDir !== realRoot && !realDir.startsWith(`${realRoot}${sep}`)) return undefined;
    const fh = await open(file, fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK);
    try {
      const st = await fh.stat();
      if (!st.isFile() || st.size > MAX_BYTES) return undefined;
      return await fh.readFile();
    } finally {
      await fh.close();
    }
  } catch {
    return undefined;
  }
}
