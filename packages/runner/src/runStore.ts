import { closeSync, createReadStream } from 'node:fs';
import { join } from 'node:path';
import { type OpenProblem, openBeneath, openDirBeneath, readHead } from './artifactFiles.js';
import { type ArtifactInfo, HitLog, listArtifacts, writeJsonAtomic } from './manifest.js';
import { runDirName, runIdProblem } from './runIds.js';

/** One entry of a run's artifacts, as a run store lists it. */
export interface StoredArtifact extends ArtifactInfo {
  /** A regular file whose bytes a shared store holds: their sha256 (hex). */
  sha256?: string;
  /** A regular file whose bytes a shared store holds: its media type (`mimeTypeOf`). */
  mime_type?: string;
  /**
   * Where the bytes are, in a shared store: `store` (copied in, readable from any host) or
   * `worker` (over the copy caps: only on the disk of `host`, at `worker_path`). Absent in the
   * file store, whose artifacts are the files themselves.
   */
  bytes_kept?: 'store' | 'worker';
  /** For `bytes_kept: 'worker'`: the host that ran it. */
  host?: string;
  /** For `bytes_kept: 'worker'`: the file's absolute path on that host. */
  worker_path?: string;
}

/** A run's record as a run store finds it: a run's manifest, or a cache hit's record. */
export interface FoundRun {
  kind: 'run' | 'hit';
  manifest: Record<string, unknown>;
}

/**
 * What reading an artifact's bytes gave: the bytes, or why not. The problems are those of
 * opening by descriptor (`missing`, `symlink`, `not_regular`, `not_directory`, with `at`, the part
 * of the path walked), `too_large` (over the read's cap; `size` says how big), and `elsewhere`:
 * the bytes stayed on the worker that ran it (`message` names the host and path).
 */
export type ArtifactBytes =
  | { ok: true; bytes: Buffer }
  | ({ ok: false } & OpenProblem)
  | { ok: false; problem: 'too_large'; at: string; size: number }
  | { ok: false; problem: 'elsewhere'; at: string; message: string };

/**
 * Where forge keeps its run records: each run's manifest, the records of cache hits, and what a
 * run's artifacts are (and, in a store shared by several hosts, their bytes up to a cap), so a
 * front-end reads a run a worker on another host made.
 *
 * The contract (the conformance suite `describeRunStore` checks it):
 * - `writeManifest(runId, manifest, {runDir})` writes (or replaces) the run's manifest; a reader
 *   sees the old one or the whole new one, never part of one, even when the writer is killed
 *   mid-write. `runDir` is the run's directory on this host, its artifacts in `artifacts/` below
 *   it, after the run: a shared store records what they are then (bytes up to its caps, metadata
 *   of the rest); the file store writes the manifest there and reads the artifacts there whenever
 *   asked.
 * - `appendHit(record)` keeps a cache hit's record (`record.run_id` is the hit's id); a hit has no
 *   artifacts of its own.
 * - `readManifest(runId)` is the run's manifest or hit record, or undefined (none, or not a run id).
 * - `listArtifacts(runId)` lists a run's artifacts (at most `max`, default 1000), `[]` when none.
 * - `readArtifact(runId, path, maxBytes)` reads one regular file's bytes (`path` relative and
 *   normalized, checked by the caller), never following a symbolic link, at most `maxBytes`.
 * - Write methods throw a `TypeError` for a run id that is not one; reads answer "none".
 * - Many processes may write one store at once; nothing written is lost or torn.
 *
 * Who may read a run is decided above the store (runs.ts), never by it.
 */
export interface RunStore {
  /** `file`, `postgres`, …: for `forge doctor` and messages. */
  readonly kind: string;
  /** Where it keeps records (a directory; a database URL without its password). */
  readonly where: string;
  writeManifest(runId: string, manifest: Record<string, unknown>, options?: { runDir?: string }): Promise<void>;
  appendHit(record: Record<string, unknown> & { run_id: string }): Promise<void>;
  readManifest(runId: string): Promise<FoundRun | undefined>;
  listArtifacts(runId: string, max?: number): Promise<StoredArtifact[]>;
  readArtifact(runId: string, path: string, maxBytes: number): Promise<ArtifactBytes>;
}

/** Throws the `TypeError` of a run id that is not one (for implementations of {@link RunStore}). */
export function assertRunId(runId: unknown): asserts runId is string {
  const bad = runIdProblem(runId);
  if (bad) throw new TypeError(bad);
}

const MAX_MANIFEST_BYTES = 8 << 20;

/**
 * The file implementation of {@link RunStore}, forge's layout since the start: under `runsDir`,
 * a directory per run `<YYYYMMDDTHHMMSSZ>_<id>` holding `run_manifest.json` (written atomically,
 * mode 0600) and `artifacts/` (the sandbox's directory itself); cache hits as JSON lines in
 * `hits.jsonl` (lines of one tick appended together). Every read opens by descriptor beneath
 * `runsDir` without following links.
 */
export function fileRunStore(runsDir: string): RunStore {
  const hits = new HitLog(join(runsDir, 'hits.jsonl'));
  return {
    kind: 'file',
    where: runsDir,
    async writeManifest(runId, manifest, o = {}) {
      // The pipeline names the directory it made (under runsDir: its name is the id's).
      if (o.runDir === undefined) assertRunId(runId);
      await writeJsonAtomic(join(o.runDir ?? join(runsDir, runDirName(runId) as string), 'run_manifest.json'), manifest);
    },
    async appendHit(record) {
      assertRunId(record.run_id);
      await hits.append(record);
    },
    async readManifest(runId) {
      if (runIdProblem(runId)) return undefined;
      const m = openBeneath(runsDir, [runDirName(runId) as string], 'run_manifest.json');
      if ('fd' in m) {
        try {
          const text = m.size <= MAX_MANIFEST_BYTES ? readHead(m.fd, m.size).toString('utf8') : undefined;
          const manifest = text === undefined ? undefined : parseObject(text);
          return manifest ? { kind: 'run', manifest } : undefined;
        } finally {
          closeSync(m.fd);
        }
      }
      // No run directory: a cache hit's id, or nothing.
      if (m.problem !== 'missing' || m.at !== '') return undefined;
      const hit = await findHit(runsDir, runId);
      return hit ? { kind: 'hit', manifest: hit } : undefined;
    },
    async listArtifacts(runId, max = 1000) {
      if (runIdProblem(runId)) return [];
      const dir = openDirBeneath(runsDir, [runDirName(runId) as string, 'artifacts']);
      if (!('fd' in dir)) return [];
      try {
        return listArtifacts(`/proc/self/fd/${dir.fd}`, max);
      } finally {
        closeSync(dir.fd);
      }
    },
    async readArtifact(runId, path, maxBytes) {
      if (runIdProblem(runId)) return { ok: false, problem: 'missing', at: '' };
      const opened = openBeneath(runsDir, [runDirName(runId) as string, 'artifacts'], path);
      if ('problem' in opened) return { ok: false, ...opened };
      try {
        if (opened.size > maxBytes) return { ok: false, problem: 'too_large', at: path, size: opened.size };
        return { ok: true, bytes: readHead(opened.fd, opened.size) };
      } finally {
        closeSync(opened.fd);
      }
    },
  };
}

/** The hit record of `runId` in `hits.jsonl` (read by descriptor, line by line), or undefined. */
async function findHit(runsDir: string, runId: string): Promise<Record<string, unknown> | undefined> {
  // Loaded here: a process that reads no run record never loads readline.
  const { createInterface } = await import('node:readline');
  const f = openBeneath(runsDir, [], 'hits.jsonl');
  if ('problem' in f) return undefined;
  const needle = `"run_id":${JSON.stringify(runId)}`;
  const lines = createInterface({ input: createReadStream('', { fd: f.fd, autoClose: true }), crlfDelay: Number.POSITIVE_INFINITY });
  try {
    for await (const line of lines) {
      if (!line.includes(needle)) continue;
      const rec = parseObject(line);
      if (rec?.run_id === runId) return rec;
    }
  } finally {
    lines.close();
  }
  return undefined;
}

/** `text` as a JSON object, or undefined. */
export function parseObject(text: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(text);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
