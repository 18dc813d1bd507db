import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Budget } from '@forge/policy';
import type { RunResult } from '@forge/sandbox';
import type { EnvelopeMeta } from '../../envelope.js';
import { checkMetaFiles } from '../../metaFiles.js';
import { redactBytes, redactCutEnd, redactFileInPlace, redactTail, redactText, type SecretList } from '../../redact.js';
import { type ScrubReport, scrubArtifacts } from '../../scrub.js';

/**
 * The keep-outputs stage of a sandboxed run: what the tool left, made safe to keep. Secret values
 * are scrubbed from its artifacts, the whole stdout spilled past the cap is moved among them
 * (redacted), the end of stderr is redacted; after the verdict, stdout that was not an envelope is
 * kept too, and the files an answer names are checked against the disk.
 */

/** Where a run keeps its outputs, and the secret values that must not stay in them. */
export interface KeepPlace {
  /** The run's directory (`runs/<ts>_<id>`) and its artifacts directory inside. */
  runDir: string;
  artifacts: string;
  secrets: SecretList;
}

/** What was kept of a run. */
export interface Kept {
  /** The end of stderr, redacted. */
  stderr: string;
  /** Where the whole stdout is, when the sandbox spilled it. */
  fullStdout: string | undefined;
  /** Secret values written into artifact files, replaced on disk after the run. */
  scrubbed: ScrubReport | undefined;
}

/** Keeps `result`'s outputs at `place`, with secret values removed. */
export async function keepOutputs(result: RunResult, place: KeepPlace, budget: Pick<Budget, 'artifacts_bytes'>): Promise<Kept> {
  const { artifacts, secrets } = place;
  // What the tool wrote among its artifacts, searched before forge adds its own files there.
  const scrubbed = secrets.length > 0 ? await scrubOrClear(artifacts, secrets, scrubLimits(budget)) : undefined;
  let fullStdout: string | undefined;
  if (result.stdoutFile) {
    // The whole stdout, moved among the artifacts only now (the tool cannot have placed
    // anything there under that name), with secret values removed first. Killed by forge (a
    // limit, a timeout, a cancel), it may end in the middle of a secret.
    fullStdout = join(artifacts, 'full_stdout.bin');
    if (secrets.length > 0) redactFileInPlace(result.stdoutFile, secrets, { cutEnd: result.reason !== 'exit' });
    rmSync(fullStdout, { recursive: true, force: true });
    renameSync(result.stdoutFile, fullStdout);
  }
  // The sandbox keeps only the last bytes of stderr: a secret may straddle where it cut.
  const stderr = redactTail(result.stderrTail, secrets, Buffer.byteLength(result.stderrTail) >= result.limits.stderrTailBytes);
  return { stderr, fullStdout, scrubbed };
}

/** Where {@link keepInvalidStdout} keeps stdout that is not an envelope. */
export function invalidStdoutPath(artifacts: string): string {
  return join(artifacts, 'stdout.bin');
}

/** Keeps the stdout of a run whose output was not an envelope among its artifacts, redacted. */
export function keepInvalidStdout(result: RunResult, place: KeepPlace): void {
  const { runDir, artifacts, secrets } = place;
  // Written beside the artifacts, then renamed in (the tool could have left a symlink there).
  const kept = invalidStdoutPath(artifacts);
  const killed = result.reason !== 'exit';
  writeFileSync(join(runDir, 'stdout.bin'), killed ? redactCutEnd(result.stdout, secrets) : redactBytes(result.stdout, secrets), {
    mode: 0o600,
    flag: 'wx',
  });
  rmSync(kept, { recursive: true, force: true });
  renameSync(join(runDir, 'stdout.bin'), kept);
}

/** An answer's meta with the files it names as found on disk now (metaFiles.ts), never as the tool says. */
export function keptFiles(meta: EnvelopeMeta, artifacts: string, runId: string): EnvelopeMeta {
  if (meta.files === undefined) return meta;
  const checked = checkMetaFiles(artifacts, runId, meta.files);
  return { ...meta, files: checked.files, ...(checked.dropped.length > 0 ? { files_dropped: checked.dropped } : {}) };
}

/** Bytes and entries of a run's artifacts searched for secret values (the artifacts budget when policy sets one). */
function scrubLimits(budget: object): { maxBytes: number; maxEntries: number } {
  const cap = (budget as { artifacts_bytes?: unknown }).artifacts_bytes;
  return { maxBytes: typeof cap === 'number' && cap > 0 ? cap : DEFAULT_SCRUB_BYTES, maxEntries: 100_000 };
}
const DEFAULT_SCRUB_BYTES = 1 << 30;

/** {@link scrubArtifacts}, failing closed: artifacts that cannot be searched are all removed. */
async function scrubOrClear(dir: string, secrets: SecretList, limits: ReturnType<typeof scrubLimits>): Promise<ScrubReport> {
  try {
    return await scrubArtifacts(dir, secrets, limits);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { mode: 0o700 });
    const why = redactText((err as Error).message, secrets);
    return {
      files: [],
      renamed: [],
      removed: [{ path: '.', reason: `could not be searched for secret values: ${why}` }],
      scanned_bytes: 0,
    };
  }
}
