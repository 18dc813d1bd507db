import { closeSync } from 'node:fs';
import { posix } from 'node:path';
import { MIME_HEAD_BYTES, mimeTypeOf, openBeneath, readHead } from './artifactFiles.js';
import { artifactPathProblem, artifactUri } from './runIds.js';

/** One file a tool named in `meta.files`, as forge checked it after the run. */
export interface FileRef {
  /** Relative to the run's artifacts directory. */
  path: string;
  /** Bytes, when forge looked. */
  size: number;
  /** By extension; an image type only when its first bytes agree (see {@link mimeTypeOf}). */
  mime_type: string;
  /** `forge://runs/<run_id>/artifacts/<path>`, readable with `readArtifact` (MCP `resources/read`). */
  uri: string;
}

/** A name in `meta.files` that forge dropped, and why. */
export interface DroppedFile {
  /** The name as the tool gave it (at most 200 characters). */
  path: string;
  reason: string;
}

/** Names of `meta.files` forge checks; the rest are dropped with one note. */
export const MAX_META_FILES = 100;

const INSIDE = '/forge/artifacts/';

/**
 * Checks the files a tool named in its envelope's `meta.files` (an array of paths relative to its
 * artifacts directory, or absolute under `/forge/artifacts/`; a `{path}` object is read as its
 * path) against what is on disk after the run, under `artifactsDir`: each must be a regular file
 * reached without a symbolic link on the way and inside the artifacts directory. Returns the files
 * that are (in the order named, each once, at most {@link MAX_META_FILES}) and the names dropped,
 * with the reason. Never throws for what the tool wrote.
 */
export function checkMetaFiles(artifactsDir: string, runId: string, named: unknown): { files: FileRef[]; dropped: DroppedFile[] } {
  const files: FileRef[] = [];
  const dropped: DroppedFile[] = [];
  if (!Array.isArray(named)) {
    dropped.push({ path: shown(named), reason: 'meta.files must be an array of paths under /forge/artifacts' });
    return { files, dropped };
  }
  const seen = new Set<string>();
  for (const [i, item] of named.entries()) {
    if (i >= MAX_META_FILES) {
      dropped.push({ path: `(${named.length - MAX_META_FILES} more)`, reason: `meta.files names at most ${MAX_META_FILES} files` });
      break;
    }
    const raw =
      typeof item === 'object' && item !== null && typeof (item as { path?: unknown }).path === 'string'
        ? (item as { path: string }).path
        : item;
    if (typeof raw !== 'string') {
      dropped.push({ path: shown(raw), reason: 'not a path (a string)' });
      continue;
    }
    const rel = relativePath(raw);
    const problem = rel === undefined ? `not inside /forge/artifacts` : artifactPathProblem(rel);
    if (rel === undefined || problem) {
      dropped.push({ path: shown(raw), reason: problem ?? 'not inside /forge/artifacts' });
      continue;
    }
    if (seen.has(rel)) continue;
    seen.add(rel);
    const f = openBeneath(artifactsDir, [], rel);
    if ('problem' in f) {
      dropped.push({ path: shown(raw), reason: REASONS[f.problem](f.at) });
      continue;
    }
    try {
      files.push({ path: rel, size: f.size, mime_type: mimeTypeOf(rel, readHead(f.fd, MIME_HEAD_BYTES)), uri: artifactUri(runId, rel) });
    } finally {
      closeSync(f.fd);
    }
  }
  return { files, dropped };
}

const REASONS: Record<'missing' | 'symlink' | 'not_regular' | 'not_directory', (at: string) => string> = {
  missing: (at) => `no file "${at}" among the run's artifacts`,
  symlink: (at) => `"${at}" is a symbolic link (forge serves only regular files, never a link's target)`,
  not_regular: (at) => `"${at}" is not a regular file`,
  not_directory: (at) => `"${at}" is not a directory`,
};

/** The path relative to the artifacts directory (normalized), or undefined when it points outside. */
function relativePath(raw: string): string | undefined {
  if (raw.includes('\0')) return raw; // refused by artifactPathProblem, with its reason
  if (raw.startsWith('/')) {
    const n = posix.normalize(raw);
    return n.startsWith(INSIDE) ? n.slice(INSIDE.length).replace(/\/+$/, '') : undefined;
  }
  const n = posix.normalize(raw).replace(/\/+$/, '');
  return n === '..' || n.startsWith('../') ? undefined : n;
}

function shown(v: unknown): string {
  const s = typeof v === 'string' ? v : (JSON.stringify(v) ?? String(v));
  return s.length > 200 ? `${s.slice(0, 200)}…` : s;
}

/**
 * `files` of a cached result, with each URI naming `runId` (a cache hit's own id) instead of the
 * run that produced it: a hit's caller reads them through its own hit, which names the seed run.
 */
export function rebaseFiles(files: unknown, runId: string): unknown {
  if (!Array.isArray(files)) return files;
  return files.map((f) =>
    typeof f === 'object' && f !== null && typeof (f as FileRef).path === 'string'
      ? { ...f, uri: artifactUri(runId, (f as FileRef).path) }
      : f,
  );
}
