/**
 * Run ids and the `forge://runs/…` URIs that name a run's manifest and its artifacts.
 *
 * A run id is what {@link newId} makes: the start time in milliseconds (base 36), a dash, the
 * process's random tag (8 hex digits) and a counter (base 36, at least 4 digits), e.g.
 * `mifx2k3a-0f3a9c1e0001`. The run's directory is `<YYYYMMDDTHHMMSSZ>_<id>` under `runs/`, its
 * time part taken from the id itself, so a run id names exactly one directory.
 */

/** The exact grammar of a run id (and of a cache hit's id). */
export const RUN_ID_PATTERN = /^[0-9a-z]{1,11}-[0-9a-f]{8}[0-9a-z]{4,12}$/;

/** Why `id` is not a run id forge makes, or undefined. */
export function runIdProblem(id: unknown): string | undefined {
  if (typeof id !== 'string' || !RUN_ID_PATTERN.test(id) || runDirName(id) === undefined)
    return `run id ${JSON.stringify(typeof id === 'string' ? id.slice(0, 80) : id)} is not a forge run id (like "mifx2k3a-0f3a9c1e0001", from an envelope's meta.run_id)`;
  return undefined;
}

/** The directory name of run `id` under `runs/`, or undefined when its time part is not a date. */
export function runDirName(id: string): string | undefined {
  const ms = Number.parseInt(id.slice(0, id.indexOf('-')), 36);
  const d = new Date(ms);
  if (!Number.isSafeInteger(ms) || Number.isNaN(d.getTime())) return undefined;
  const ts = d
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
  return /^\d{8}T\d{6}Z$/.test(ts) ? `${ts}_${id}` : undefined;
}

/**
 * The URI of an artifact: `forge://runs/<run_id>/artifacts/<path>`, each path segment
 * percent-encoded (`encodeURIComponent`), so a name with a space, `#` or `?` stays one path.
 */
export function artifactUri(runId: string, path: string): string {
  return `forge://runs/${runId}/artifacts/${path.split('/').map(encodeURIComponent).join('/')}`;
}

/** The URI of a run's manifest: `forge://runs/<run_id>/manifest`. */
export function manifestUri(runId: string): string {
  return `forge://runs/${runId}/manifest`;
}

/** What a `forge://runs/…` URI names. */
export type RunUri = { kind: 'manifest'; runId: string } | { kind: 'artifact'; runId: string; path: string };

/**
 * Reads a `forge://runs/<run_id>/manifest` or `forge://runs/<run_id>/artifacts/<path>` URI (path
 * segments percent-decoded). Returns undefined for any other URI, a malformed run id or an
 * undecodable segment; the path itself is checked by the read ({@link artifactPathProblem}).
 */
export function parseRunUri(uri: string): RunUri | undefined {
  const m = /^forge:\/\/runs\/([^/?#]+)\/(manifest|artifacts\/([^?#]+))$/.exec(uri);
  if (!m || runIdProblem(m[1])) return undefined;
  const runId = m[1] as string;
  if (m[2] === 'manifest') return { kind: 'manifest', runId };
  try {
    const path = (m[3] as string).split('/').map(decodeURIComponent).join('/');
    return { kind: 'artifact', runId, path };
  } catch {
    return undefined;
  }
}

const MAX_PATH_BYTES = 1024;

/**
 * Why `path` cannot name a file among a run's artifacts, or undefined: it must be relative and
 * normalized (segments separated by single `/`, none empty, `.` or `..`), without NUL, at most
 * 1024 bytes, each segment at most 255.
 */
export function artifactPathProblem(path: unknown): string | undefined {
  if (typeof path !== 'string' || path === '') return "an artifact path must be a non-empty string, relative to the run's artifacts";
  const shown = JSON.stringify(path.slice(0, 200));
  if (path.includes('\0')) return `artifact path ${shown} contains a NUL byte`;
  if (Buffer.byteLength(path) > MAX_PATH_BYTES) return `artifact path ${shown} is longer than ${MAX_PATH_BYTES} bytes`;
  if (path.startsWith('/')) return `artifact path ${shown} is absolute; give it relative to the run's artifacts (like "out/plot.png")`;
  for (const seg of path.split('/')) {
    if (seg === '' || seg === '.' || seg === '..')
      return `artifact path ${shown} is not normalized (empty, "." or ".." segment); give it like "out/plot.png"`;
    if (Buffer.byteLength(seg) > 255) return `artifact path ${shown} has a segment longer than 255 bytes`;
  }
  return undefined;
}
