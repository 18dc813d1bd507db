import { isOperator, type PolicySnapshot } from '@forge/policy';
import { mimeTypeOf } from './artifactFiles.js';
import type { Refusal } from './refusal.js';
import { artifactPathProblem, artifactUri, manifestUri, runIdProblem } from './runIds.js';
import type { RunStore, StoredArtifact } from './runStore.js';

/**
 * Reading a run back by its id: its manifest and its artifacts, for the caller allowed to see it.
 *
 * **Who may read a run**: the persona that made the call (the manifest's `persona`; for a cache
 * hit, the hit record's), and any operator persona (policy `operator_personas`). Everyone else is
 * told the run does not exist, exactly as for a run that does not: `not_found`, one message, so a
 * refusal never says whether an id is in use. A cache hit has no run directory: its id reads as
 * the hit record (`runs/hits.jsonl`), and its artifacts are the seed run's (the run whose result
 * was cached), served to the hit's persona through the hit's own id.
 */

/** One entry of a run's artifacts directory (walked when read; links listed, never followed). */
export interface RunArtifact extends StoredArtifact {
  /** For a regular file: its `forge://runs/<run_id>/artifacts/<path>` URI. */
  uri?: string;
}

/** A run as {@link readRun} returns it. */
export interface RunRecord {
  ok: true;
  run_id: string;
  /** `run`: a sandboxed run (its `run_manifest.json`); `hit`: a cache hit (its line of `runs/hits.jsonl`). */
  kind: 'run' | 'hit';
  /** `forge://runs/<run_id>/manifest` */
  uri: string;
  /** The manifest as written (a hit: its hit record, with `seed_run`). */
  manifest: Record<string, unknown>;
  /** What the artifacts directory holds now (a hit: the seed run's), at most 1000 entries. */
  artifacts: RunArtifact[];
}

/** An artifact's bytes as {@link readArtifact} returns them. */
export interface ArtifactContent {
  ok: true;
  run_id: string;
  path: string;
  uri: string;
  /** By extension, an image type only when the bytes agree (`mimeTypeOf`). */
  mime_type: string;
  size: number;
  bytes: Buffer;
}

/** Default cap of one artifact read. */
export const DEFAULT_ARTIFACT_MAX_BYTES = 16 << 20;

/** What the reads need from the engine. */
export interface RunReadDeps {
  /** Where the run records are (the file store under the project's `runs/`, or a shared one). */
  runs: RunStore;
  persona: string;
  session: string;
  /** The policy now (operators), or why there is none. */
  policy: () => { ok: true; snap: PolicySnapshot } | Refusal;
  /** Settles once the hit records written so far are on disk. */
  hitsWritten: () => Promise<unknown>;
  /** Audits a refused read (never throws). */
  refused: (data: Record<string, unknown>) => Promise<unknown>;
}

type Found =
  | { kind: 'run'; manifest: Record<string, unknown>; artifactsOf: string }
  | { kind: 'hit'; manifest: Record<string, unknown>; artifactsOf: string | undefined };

/** The run `runId`'s manifest and artifact list, for a caller allowed to see it; else a refusal. */
export async function readRun(deps: RunReadDeps, runId: string): Promise<RunRecord | Refusal> {
  const bad = runIdProblem(runId);
  if (bad) return { ok: false, kind: 'validation_failed', message: bad };
  const found = await findRun(deps, runId);
  if ('ok' in found) return found;
  const f = found as Found;
  const artifacts: RunArtifact[] = [];
  if (f.artifactsOf) {
    for (const a of await deps.runs.listArtifacts(f.artifactsOf)) {
      artifacts.push(a.kind === 'file' ? { ...a, uri: artifactUri(runId, a.path) } : a);
    }
  }
  return { ok: true, run_id: runId, kind: f.kind, uri: manifestUri(runId), manifest: f.manifest, artifacts };
}

/**
 * The bytes of `path` among the artifacts of run `runId` (a cache hit: of its seed run), for a
 * caller allowed to see the run. `path` is relative and normalized; every component is opened
 * by descriptor without following links, so a link (to `/etc/passwd`, to another run) is refused.
 * At most `maxBytes` (default 16 MiB): a larger file is `resource_limit`.
 */
export async function readArtifact(
  deps: RunReadDeps,
  runId: string,
  path: string,
  options: { maxBytes?: number } = {},
): Promise<ArtifactContent | Refusal> {
  const bad = runIdProblem(runId) ?? artifactPathProblem(path);
  if (bad) return { ok: false, kind: 'validation_failed', message: bad };
  const maxBytes = options.maxBytes ?? DEFAULT_ARTIFACT_MAX_BYTES;
  if (!Number.isSafeInteger(maxBytes) || maxBytes < 0)
    return { ok: false, kind: 'validation_failed', message: `maxBytes must be a non-negative integer (got ${maxBytes})` };
  const found = await findRun(deps, runId);
  if ('ok' in found) return found;
  const f = found as Found;
  const refuse = async (kind: Refusal['kind'], message: string, why: string): Promise<Refusal> => {
    await deps.refused({ run_id: runId, path, persona: deps.persona, session: deps.session, kind, reason: why });
    return { ok: false, kind, message };
  };
  if (!f.artifactsOf) return refuse('not_found', `run "${runId}" has no artifact "${path}"`, 'seed_run_missing');
  const read = await deps.runs.readArtifact(f.artifactsOf, path, maxBytes);
  if (!read.ok) {
    if (read.problem === 'too_large') {
      return refuse(
        'resource_limit',
        `artifact "${path}" of run "${runId}" is ${read.size} bytes, over the read limit of ${maxBytes}; read a smaller file, or ask with a larger maxBytes`,
        'too_large',
      );
    }
    if (read.problem === 'elsewhere') return refuse('resource_limit', read.message, 'on_worker');
    const [kind, message] = artifactProblem(runId, path, read);
    return refuse(kind, message, read.problem);
  }
  const { bytes } = read;
  return { ok: true, run_id: runId, path, uri: artifactUri(runId, path), mime_type: mimeTypeOf(path, bytes), size: bytes.length, bytes };
}

function artifactProblem(runId: string, path: string, p: { problem: string; at: string }): [Refusal['kind'], string] {
  const where = p.at === path ? `"${path}"` : `"${p.at}" (on the way to "${path}")`;
  switch (p.problem) {
    case 'missing':
      return ['not_found', `run "${runId}" has no artifact "${path}"; readRun lists what it has`];
    case 'symlink':
      return [
        'policy_denied',
        `artifact ${where} of run "${runId}" is a symbolic link; forge serves only regular files and never follows a link a tool left`,
      ];
    case 'not_directory':
      return ['not_found', `artifact ${where} of run "${runId}" is not a directory; readRun lists what the run has`];
    default:
      return ['policy_denied', `artifact ${where} of run "${runId}" is not a regular file; forge serves only regular files`];
  }
}

/** The run's record if `deps.persona` may see it; the same `not_found` refusal whether it is missing or another's. */
async function findRun(deps: RunReadDeps, runId: string): Promise<Found | Refusal> {
  const pol = deps.policy();
  if (!pol.ok) return pol;
  const notFound = async (why: string): Promise<Refusal> => {
    await deps.refused({ run_id: runId, persona: deps.persona, session: deps.session, kind: 'not_found', reason: why });
    return {
      ok: false,
      kind: 'not_found',
      message: `no run "${runId}" that persona "${deps.persona}" may read (a run is readable by the persona that made the call and by operator personas, policy operator_personas)`,
    };
  };
  // Hits queued by this process are written before one is looked for.
  await Promise.resolve(deps.hitsWritten()).catch(() => {});
  const record = await deps.runs.readManifest(runId);
  let found: Found | undefined;
  if (record?.kind === 'run') found = { kind: 'run', manifest: record.manifest, artifactsOf: runId };
  else if (record) {
    const seed =
      typeof record.manifest.seed_run === 'string' && !runIdProblem(record.manifest.seed_run) ? record.manifest.seed_run : undefined;
    found = { kind: 'hit', manifest: record.manifest, artifactsOf: seed };
  }
  if (!found) return notFound('missing');
  const persona = found.manifest.persona;
  if (persona !== deps.persona && !isOperator(pol.snap, deps.persona)) return notFound(`not_yours`);
  return found;
}
