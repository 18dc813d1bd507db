import { createHash } from 'node:crypto';
import { closeSync, constants as fsc, fstatSync, openSync, readSync } from 'node:fs';
import { lstat, open, readdir } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { type ArtifactBytes, assertRunId, MIME_HEAD_BYTES, mimeTypeOf, type RunStore, type StoredArtifact } from '@forge/runner';
import type pg from 'pg';
import { RUNS_TABLE } from './cache-runs-schema.js';
import { describeError, PostgresStoreError } from './errors.js';
import { poolLocator } from './registry-record.js';
import { redactUrl } from './url.js';

export { RUN_ARTIFACTS_TABLE, RUNS_TABLE } from './cache-runs-schema.js';

/** An artifact as the store lists it: the runner's `StoredArtifact`. */
export type PostgresRunArtifact = StoredArtifact;

/** What reading an artifact gave: the runner's `ArtifactBytes`. */
export type PostgresArtifactBytes = ArtifactBytes;

/** The runner's `RunStore` (of @forge/runner, see its contract there), over PostgreSQL. */
export interface PostgresRunStore extends RunStore {
  readonly kind: 'postgres';
}

/** Options of {@link postgresRunStore}. */
export interface PostgresRunStoreOptions {
  /** This host's name, recorded with each run it writes (default `os.hostname()`). */
  host?: string;
  /** Largest artifact whose bytes are copied into the database (default 1 MiB); larger ones stay on this host's disk. */
  maxArtifactBytes?: number;
  /** Bytes of one run's artifacts copied in all (default 16 MiB); files past it stay on this host's disk. */
  maxRunBytes?: number;
  /** Entries of a run's artifacts directory recorded (default 1000, as the runner lists). */
  maxArtifacts?: number;
  /** What `where` shows instead of the pool's connection (a URL: its password is masked anyway). */
  where?: string;
}

const UNDEFINED_TABLE = '42P01';
/** Whether `id` is a forge run id (the runner's grammar: its `assertRunId` does not throw). */
function isRunId(id: unknown): id is string {
  try {
    assertRunId(id);
    return true;
  } catch {
    return false;
  }
}

/** A relative, normalized path of segments that are neither empty, `.` nor `..`. */
function pathOk(path: string): boolean {
  return (
    typeof path === 'string' &&
    path.length > 0 &&
    !path.startsWith('/') &&
    path.split('/').every((s) => s !== '' && s !== '.' && s !== '..' && !s.includes('\0'))
  );
}

/**
 * The run records of many front-ends and workers in two tables, `forge_runs` and
 * `forge_run_artifacts` (migration 31, `CACHE_RUNS_MIGRATIONS`): the runner's `RunStore` contract,
 * so a front-end reads a run that a worker on another host made.
 *
 * A manifest is written in one transaction with its artifacts' metadata, walked from the run's
 * artifacts directory on the writer's host (`<runDir>/artifacts`) the first time the run is written (links listed, never
 * followed). A regular file's bytes are copied in (with their sha256 and media type) while the file
 * is at most `maxArtifactBytes` and the run's copied bytes stay within `maxRunBytes`; past those
 * the bytes stay on the writer's disk (`bytes_kept: 'worker'`, with `host` and `worker_path`), read
 * from there by a store on the same host, and refused elsewhere with a message naming the host and
 * the path. Cache hit records appended in one turn of the event loop go in one statement.
 *
 * `pool` is the caller's and stays open. The database must be migrated; until it is, every call
 * rejects with `not_migrated`.
 */
export function postgresRunStore(pool: pg.Pool, options: PostgresRunStoreOptions = {}): PostgresRunStore {
  const host = options.host ?? hostname();
  const caps = {
    maxArtifactBytes: options.maxArtifactBytes ?? 1 << 20,
    maxRunBytes: options.maxRunBytes ?? 16 << 20,
    maxArtifacts: options.maxArtifacts ?? 1000,
  };
  for (const [k, v] of Object.entries(caps))
    if (!Number.isSafeInteger(v) || v < 0) throw new TypeError(`postgresRunStore: ${k} must be a non-negative integer (got ${v})`);
  const where = options.where !== undefined ? redactUrl(options.where) : poolLocator(pool.options);
  const fail = (what: string, err: unknown): never => {
    if (err instanceof PostgresStoreError || err instanceof TypeError) throw err;
    if ((err as { code?: unknown }).code === UNDEFINED_TABLE)
      throw new PostgresStoreError(
        'not_migrated',
        `the run store at ${where} has no table ${RUNS_TABLE}: the database is not migrated; run migrate() with MIGRATIONS (forge does on start)`,
        { cause: err },
      );
    throw new PostgresStoreError('query_failed', `${what} in the run store at ${where} failed: ${describeError(err)}`, { cause: err });
  };
  const q = async <R extends pg.QueryResultRow>(what: string, text: string, values: unknown[]): Promise<pg.QueryResult<R>> => {
    try {
      return await pool.query<R>(text, values);
    } catch (err) {
      return fail(what, err);
    }
  };

  // Hit records of one turn of the event loop, inserted together.
  let pending: { id: string; text: string }[] = [];
  let flushing: Promise<void> | undefined;
  const flushHits = async () => {
    const batch = pending;
    pending = [];
    flushing = undefined;
    await q(
      'appending cache hit records',
      `INSERT INTO forge_runs (run_id, kind, record, host)
       SELECT id, 'hit', record, $3 FROM unnest($1::text[], $2::text[]) AS t(id, record)
       ON CONFLICT (run_id) DO NOTHING`,
      [batch.map((b) => b.id), batch.map((b) => b.text), host],
    );
  };

  return {
    kind: 'postgres',
    where,
    async writeManifest(runId, manifest, o = {}) {
      assertRunId(runId);
      const text = JSON.stringify(manifest);
      const artifactsDir = o.runDir !== undefined ? join(o.runDir, 'artifacts') : undefined;
      const artifacts = artifactsDir ? await walkArtifacts(artifactsDir, caps) : [];
      try {
        await insertRun(pool, { runId, text, host, artifactsDir, artifacts });
      } catch (err) {
        return fail(`writing the manifest of run "${runId}"`, err);
      }
    },
    async appendHit(record) {
      assertRunId(record.run_id);
      pending.push({ id: record.run_id, text: JSON.stringify(record) });
      flushing ??= new Promise<void>((r) => setImmediate(r)).then(flushHits);
      await flushing;
    },
    async readManifest(runId) {
      if (!isRunId(runId)) return undefined;
      const r = await q<{ kind: 'run' | 'hit'; record: string }>(
        `reading run "${runId}"`,
        'SELECT kind, record FROM forge_runs WHERE run_id = $1',
        [runId],
      );
      const row = r.rows[0];
      if (!row) return undefined;
      const manifest = parseObject(row.record);
      return manifest ? { kind: row.kind, manifest } : undefined;
    },
    async listArtifacts(runId, max = 1000) {
      if (!isRunId(runId)) return [];
      const r = await q<ArtifactRow>(
        `listing the artifacts of run "${runId}"`,
        `SELECT a.path, a.kind, a.bytes, a.sha256, a.mime_type, a.kept, r.host, r.artifacts_dir
         FROM forge_run_artifacts a JOIN forge_runs r USING (run_id) WHERE a.run_id = $1 ORDER BY a.ord LIMIT $2`,
        [runId, Math.max(0, Math.floor(max))],
      );
      return r.rows.map(listed);
    },
    async readArtifact(runId, path, maxBytes) {
      if (!isRunId(runId) || !pathOk(path)) return { ok: false, problem: 'missing', at: '' };
      const segs = path.split('/');
      const prefixes = segs.map((_, i) => segs.slice(0, i + 1).join('/'));
      const r = await q<ArtifactRow & { content: Buffer | null }>(
        `reading artifact "${path}" of run "${runId}"`,
        `SELECT a.path, a.kind, a.bytes, a.sha256, a.mime_type, a.kept, r.host, r.artifacts_dir,
                CASE WHEN a.path = $2 AND a.kind = 'file' AND a.kept = 'store' AND a.bytes <= $3 THEN a.content END AS content
         FROM forge_run_artifacts a JOIN forge_runs r USING (run_id) WHERE a.run_id = $1 AND a.path = ANY($4::text[])`,
        [runId, path, maxBytes, prefixes],
      );
      const rows = new Map(r.rows.map((row) => [row.path, row]));
      for (const at of prefixes.slice(0, -1)) {
        const row = rows.get(at);
        if (!row) return { ok: false, problem: 'missing', at };
        if (row.kind === 'symlink') return { ok: false, problem: 'symlink', at };
        if (row.kind !== 'directory') return { ok: false, problem: 'not_directory', at };
      }
      const row = rows.get(path);
      if (!row) return { ok: false, problem: 'missing', at: path };
      if (row.kind === 'symlink') return { ok: false, problem: 'symlink', at: path };
      if (row.kind !== 'file') return { ok: false, problem: 'not_regular', at: path };
      const size = Number(row.bytes);
      if (size > maxBytes) return { ok: false, problem: 'too_large', at: path, size };
      if (row.kept === 'store' && row.content) return { ok: true, bytes: row.content };
      const workerPath = row.artifacts_dir ? join(row.artifacts_dir, path) : '(unknown)';
      if (row.host === host && row.artifacts_dir) {
        const local = readBeneath(row.artifacts_dir, segs, maxBytes);
        if (local) return local;
      }
      return {
        ok: false,
        problem: 'elsewhere',
        at: path,
        message: `artifact "${path}" of run "${runId}" (${size} bytes) was over the run store's copy caps (${caps.maxArtifactBytes} bytes a file, ${caps.maxRunBytes} a run), so its bytes stayed on the host that ran it: host "${row.host}", file ${workerPath}${row.host === host ? ' (no longer there)' : ''}; read it on that host, or raise maxArtifactBytes/maxRunBytes of postgresRunStore there`,
      };
    },
  };
}

/**
 * Writes a run's manifest, and its artifacts' rows the first time the run is written, in one
 * transaction (rolled back on any failure, which is rethrown as it is).
 */
async function insertRun(
  pool: pg.Pool,
  run: { runId: string; text: string; host: string; artifactsDir: string | undefined; artifacts: Walked[] },
): Promise<void> {
  const { runId, artifacts } = run;
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const r = await client.query<{ inserted: boolean }>(
      `INSERT INTO forge_runs (run_id, kind, record, host, artifacts_dir) VALUES ($1, 'run', $2, $3, $4)
       ON CONFLICT (run_id) DO UPDATE SET record = EXCLUDED.record, written_at = now()
       RETURNING (xmax = 0) AS inserted`,
      [runId, run.text, run.host, run.artifactsDir ?? null],
    );
    if (r.rows[0]?.inserted && artifacts.length > 0) {
      await client.query(
        `INSERT INTO forge_run_artifacts (run_id, path, ord, kind, bytes, sha256, mime_type, kept, content)
         SELECT $1, * FROM unnest($2::text[], $3::int[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::bytea[])
         ON CONFLICT (run_id, path) DO NOTHING`,
        [
          runId,
          artifacts.map((a) => a.path),
          artifacts.map((_, i) => i),
          artifacts.map((a) => a.kind),
          artifacts.map((a) => a.bytes),
          artifacts.map((a) => a.sha256 ?? null),
          artifacts.map((a) => a.mime_type ?? null),
          artifacts.map((a) => a.kept ?? null),
          artifacts.map((a) => a.content ?? null),
        ],
      );
    }
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

interface ArtifactRow {
  path: string;
  kind: PostgresRunArtifact['kind'];
  bytes: string;
  sha256: string | null;
  mime_type: string | null;
  kept: 'store' | 'worker' | null;
  host: string;
  artifacts_dir: string | null;
}

function listed(row: ArtifactRow): PostgresRunArtifact {
  const a: PostgresRunArtifact = { path: row.path, bytes: Number(row.bytes), kind: row.kind };
  if (row.sha256) a.sha256 = row.sha256;
  if (row.mime_type) a.mime_type = row.mime_type;
  if (row.kept) a.bytes_kept = row.kept;
  if (row.kept === 'worker') {
    a.host = row.host;
    a.worker_path = row.artifacts_dir ? join(row.artifacts_dir, row.path) : '';
  }
  return a;
}

interface Walked extends PostgresRunArtifact {
  kept?: 'store' | 'worker';
  content?: Buffer;
}

const O_FILE = fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK;

/**
 * The entries of `dir` in the runner's order (each directory's names sorted, depth first), links
 * listed and never followed; regular files' bytes read (by descriptor, `O_NOFOLLOW`) within the caps.
 */
async function walkArtifacts(
  dir: string,
  caps: { maxArtifactBytes: number; maxRunBytes: number; maxArtifacts: number },
): Promise<Walked[]> {
  const out: Walked[] = [];
  let copied = 0;
  const walk = async (rel: string) => {
    let names: string[];
    try {
      names = (await readdir(rel ? join(dir, rel) : dir)).sort();
    } catch {
      return;
    }
    for (const name of names) {
      if (out.length >= caps.maxArtifacts) return;
      const path = rel ? `${rel}/${name}` : name;
      let st: Awaited<ReturnType<typeof lstat>>;
      try {
        st = await lstat(join(dir, path));
      } catch {
        continue;
      }
      const kind = st.isFile() ? 'file' : st.isDirectory() ? 'directory' : st.isSymbolicLink() ? 'symlink' : 'other';
      const a: Walked = { path, bytes: st.isFile() ? st.size : 0, kind };
      out.push(a);
      if (kind === 'directory') await walk(path);
      if (kind !== 'file') continue;
      const fits = st.size <= caps.maxArtifactBytes && copied + st.size <= caps.maxRunBytes;
      const file = await hashFile(join(dir, path), fits);
      if (!file) {
        a.kind = 'other';
        a.bytes = 0;
        continue;
      }
      a.bytes = file.size;
      a.sha256 = file.sha256;
      a.mime_type = mimeTypeOf(path, file.head);
      if (file.content && copied + file.size <= caps.maxRunBytes && file.size <= caps.maxArtifactBytes) {
        a.kept = 'store';
        a.content = file.content;
        copied += file.size;
      } else a.kept = 'worker';
    }
  };
  await walk('');
  return out;
}

/** A regular file's size, sha256 and first bytes (and all its bytes when `keep`), never through a link. */
async function hashFile(
  file: string,
  keep: boolean,
): Promise<{ size: number; sha256: string; head: Buffer; content?: Buffer } | undefined> {
  let h: Awaited<ReturnType<typeof open>>;
  try {
    h = await open(file, O_FILE);
  } catch {
    return undefined;
  }
  try {
    const st = await h.stat();
    if (!st.isFile()) return undefined;
    const hash = createHash('sha256');
    const chunks: Buffer[] = [];
    let size = 0;
    const buf = Buffer.allocUnsafe(1 << 20);
    for (;;) {
      const { bytesRead } = await h.read(buf, 0, buf.length, size);
      if (bytesRead === 0) break;
      const part = buf.subarray(0, bytesRead);
      hash.update(part);
      if (keep) chunks.push(Buffer.from(part));
      size += bytesRead;
    }
    const content = keep ? Buffer.concat(chunks) : undefined;
    const head = content ? content.subarray(0, MIME_HEAD_BYTES) : Buffer.alloc(0);
    if (!content) {
      const { bytesRead } = await h.read(buf, 0, MIME_HEAD_BYTES, 0);
      return { size, sha256: hash.digest('hex'), head: Buffer.from(buf.subarray(0, bytesRead)) };
    }
    return { size, sha256: hash.digest('hex'), head, content };
  } finally {
    await h.close();
  }
}

/** Reads `segs` below `dir` by descriptor (no link followed on the way), or undefined when it is not there. */
function readBeneath(dir: string, segs: string[], maxBytes: number): PostgresArtifactBytes | undefined {
  let fd: number;
  try {
    fd = openSync(dir, fsc.O_RDONLY | fsc.O_DIRECTORY);
  } catch {
    return undefined;
  }
  try {
    for (const [i, seg] of segs.entries()) {
      const last = i === segs.length - 1;
      const next = openSync(`/proc/self/fd/${fd}/${seg}`, last ? O_FILE : fsc.O_RDONLY | fsc.O_DIRECTORY | fsc.O_NOFOLLOW);
      closeSync(fd);
      fd = next;
    }
    const st = fstatSync(fd);
    if (!st.isFile()) return undefined;
    if (st.size > maxBytes) return { ok: false, problem: 'too_large', at: segs.join('/'), size: st.size };
    const buf = Buffer.allocUnsafe(st.size);
    let off = 0;
    while (off < st.size) {
      const n = readSync(fd, buf, off, st.size - off, off);
      if (n === 0) break;
      off += n;
    }
    return { ok: true, bytes: buf.subarray(0, off) };
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}

function parseObject(text: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(text);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
