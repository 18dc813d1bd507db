import { randomBytes } from 'node:crypto';
import { lstatSync, readdirSync } from 'node:fs';
import { appendFile, mkdir, rename, writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';

const processTag = randomBytes(4).toString('hex');
let counter = 0;

/** A run id: sortable by time, unique without coordination (a random tag per process, then a counter). */
export function newRunId(now: Date): { id: string; dirName: string } {
  const id = newId(now);
  const ts = now
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
  return { id, dirName: `${ts}_${id}` };
}

/** Just the id (a cache hit has no run directory). */
export function newId(now: Date): string {
  return `${now.getTime().toString(36)}-${processTag}${(++counter).toString(36).padStart(4, '0')}`;
}

/**
 * Writes `value` as JSON to `file` atomically (temp file, rename), mode 0600: a reader sees the
 * old file or the whole new one. Not synced: manifests are for reading what ran; the audit log,
 * which is synced, is the durable record. Asynchronous, so it overlaps the audit append.
 */
export async function writeJsonAtomic(file: string, value: unknown): Promise<void> {
  const tmp = `${file}.tmp-${processTag}-${++counter}`;
  await writeFile(tmp, `${JSON.stringify(value, null, 2)}\n`, { mode: 0o600, flag: 'wx' });
  await rename(tmp, file);
}

export interface ArtifactInfo {
  /** Path relative to the artifacts directory. */
  path: string;
  bytes: number;
  kind: 'file' | 'directory' | 'symlink' | 'other';
}

/**
 * What is in a run's artifacts directory after the run, found by walking it (never taken from
 * the tool's word). Symlinks are listed, not followed; at most `max` entries.
 */
export function listArtifacts(dir: string, max = 1000): ArtifactInfo[] {
  const out: ArtifactInfo[] = [];
  const walk = (d: string) => {
    let names: string[];
    try {
      names = readdirSync(d).sort();
    } catch {
      return;
    }
    for (const name of names) {
      if (out.length >= max) return;
      const p = join(d, name);
      const st = lstatSync(p);
      const kind = st.isFile() ? 'file' : st.isDirectory() ? 'directory' : st.isSymbolicLink() ? 'symlink' : 'other';
      out.push({ path: relative(dir, p), bytes: st.isFile() ? st.size : 0, kind });
      if (kind === 'directory') walk(p);
    }
  };
  walk(dir);
  return out;
}

/**
 * Records of cache hits, one JSON line each, appended to one file (`runs/hits.jsonl`). A hit runs
 * nothing, so it gets a line there rather than a run directory of its own: lines written in the
 * same tick go out in one append, so hits stay a lookup and a write, not four file operations.
 */
export class HitLog {
  readonly #file: string;
  #lines: string[] = [];
  #flushing: Promise<void> = Promise.resolve();

  constructor(file: string) {
    this.#file = file;
  }

  /** Queues one record; the returned promise settles once it is written (or failed to be). */
  append(record: Record<string, unknown>): Promise<void> {
    this.#lines.push(`${JSON.stringify(record)}\n`);
    if (this.#lines.length === 1) {
      // After the previous batch, whatever became of it: one failed write must not stop the rest.
      this.#flushing = this.#flushing
        .catch(() => {})
        .then(() => new Promise((r) => setImmediate(r)))
        .then(() => this.#flush());
    }
    return this.#flushing;
  }

  async #flush(): Promise<void> {
    const text = this.#lines.join('');
    this.#lines = [];
    if (!text) return;
    // The runs directory is made by the first record (a process that only lists makes nothing).
    this.#dirMade ??= mkdir(dirname(this.#file), { recursive: true, mode: 0o700 }).then(() => {});
    await this.#dirMade;
    await appendFile(this.#file, text, { mode: 0o600 });
  }
  #dirMade: Promise<void> | undefined;
}
