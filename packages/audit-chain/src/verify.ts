import type { KeyObject } from 'node:crypto';
import { type open, stat } from 'node:fs/promises';
import { basename } from 'node:path';
import { type Checkpoint, keyId, latestCheckpoint, parseCheckpoint, toKey, verifyCheckpointSignature } from './checkpoint.js';
import { AuditError, describeCause } from './errors.js';
import { scanLines } from './lines.js';
import { openRegular } from './regular-file.js';
import { type LogFiles, logFiles } from './segments.js';
import { type FirstBad, failed, newResult, type UsedCheckpoint, type VerifyOptions, type VerifyResult } from './verify-result.js';
import { snapshot, startAfter, type WalkStart } from './verify-start.js';
import { type WalkOptions, walk } from './verify-walk.js';

/**
 * Verifies the log at `path` against SPEC.md sections 4 and 5: streams every segment in bounded
 * memory, hashing the bytes as written, and compares the chain with the checkpoints. Never throws
 * for a damaged log (that is a result with `ok: false` and the first bad entry); throws
 * `io_error` when the files cannot be read and `invalid_key` for a bad public key.
 */
export async function verifyLog(path: string, options: VerifyOptions = {}): Promise<VerifyResult> {
  const files = logFiles(path);
  const pub = options.publicKey === undefined ? undefined : toKey(options.publicKey, 'public', 'publicKey');
  try {
    await stat(files.dir);
  } catch (err) {
    throw new AuditError('io_error', `cannot verify ${path}: directory ${files.dir} is not accessible (${describeCause(err)})`, {
      cause: err,
    });
  }

  if (options.fromCheckpoint) {
    const cp = await latestCheckpoint(files.checkpoints, pub);
    if (pub && !cp) return failed(newResult(), noSigned(basename(files.checkpoints), pub));
    return verifyAfterCheckpoint(path, cp, { takeLock: true });
  }

  const result = newResult();
  const cps = await readCheckpoints(files.checkpoints, pub, result);
  if ('reason' in cps) return failed(result, cps);
  const used = cps.used.filter((c) => c.entries > 0).sort((a, b) => a.entries - b.entries || a.line - b.line);
  const latest = cps.used.reduce<UsedCheckpoint | undefined>((a, c) => (!a || c.entries >= a.entries ? c : a), undefined);
  const maxCovered = used.at(-1)?.entries ?? 0;

  const bad = await verifyFrom(files, path, { used, maxCovered, result, threads: options.threads ?? 1, takeLock: true });
  if (bad) return failed(result, bad);

  if (latest) {
    result.checkpoint = { entries: latest.entries, head: latest.head, time: latest.time, signed: latest.sig !== undefined };
    if (latest.key_id) result.checkpoint.key_id = latest.key_id;
    result.uncheckpointed = result.entries - latest.entries;
  } else {
    result.uncheckpointed = result.entries;
  }
  return result;
}

/**
 * Verifies the entries of the log at `path` after checkpoint `cp` (all of them without one, or for
 * a checkpoint of 0 entries): checks that the log holds `cp`'s entry where `cp` says, then walks
 * from just after it. `cp` vouches for the entries before it, which are not read. With
 * `takeLock: false` the caller holds the writers' lock (a writer opening the log).
 */
export async function verifyAfterCheckpoint(path: string, cp: Checkpoint | undefined, o: { takeLock: boolean }): Promise<VerifyResult> {
  const result = newResult();
  const from = cp && cp.entries > 0 ? cp : undefined;
  const bad = await verifyFrom(logFiles(path), path, {
    used: [],
    maxCovered: from?.entries ?? 0,
    result,
    threads: 1,
    takeLock: o.takeLock,
    ...(from ? { from } : {}),
  });
  if (bad) return failed(result, bad);
  if (cp) {
    result.checkpoint = { entries: cp.entries, head: cp.head, time: cp.time, signed: cp.sig !== undefined };
    if (cp.key_id) result.checkpoint.key_id = cp.key_id;
  }
  result.uncheckpointed = result.entries - (cp?.entries ?? 0);
  return result;
}

/** Reads and checks the checkpoint file (SPEC.md 5.4, before the walk). */
async function readCheckpoints(
  path: string,
  pub: KeyObject | undefined,
  result: VerifyResult,
): Promise<{ used: UsedCheckpoint[] } | FirstBad> {
  const file = basename(path);
  const used: UsedCheckpoint[] = [];
  let fh: Awaited<ReturnType<typeof open>>;
  try {
    fh = await openRegular(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
      throw new AuditError('io_error', `cannot read ${path}: ${describeCause(err)}`, { cause: err });
    }
    return pub ? noSigned(file, pub) : { used };
  }
  const wantId = pub ? keyId(pub) : undefined;
  let lineNo = 0;
  let bad: FirstBad | undefined;
  try {
    await scanLines(fh, 0, (await fh.stat()).size, (raw) => {
      lineNo++;
      if (raw.torn) return false; // an interrupted checkpoint write: ignored
      const cp = raw.oversized ? 'longer than 16 MiB' : parseCheckpoint(raw.bytes.toString('utf8', 0, raw.bytes.length - 1));
      if (typeof cp === 'string') {
        bad = { seq: 0, line: lineNo, reason: 'bad_checkpoint', file, message: `checkpoint line ${lineNo} is malformed: ${cp}` };
        return false;
      }
      if (pub) {
        if (cp.key_id !== wantId) {
          result.checkpoints_ignored++;
          return true;
        }
        if (!pub || !verifyCheckpointSignature(cp, pub)) {
          bad = {
            seq: cp.entries,
            line: lineNo,
            reason: 'signature_invalid',
            file,
            message: `checkpoint line ${lineNo} (entries ${cp.entries}) has a signature that does not verify with key ${wantId}: the checkpoint was altered`,
          };
          return false;
        }
      }
      used.push({ ...cp, line: lineNo });
      return true;
    });
  } finally {
    await fh.close();
  }
  if (bad) return bad;
  if (pub && used.length === 0) return noSigned(file, pub);
  return { used };
}

function noSigned(file: string, pub: KeyObject): FirstBad {
  return {
    seq: 0,
    line: 0,
    reason: 'signature_invalid',
    file,
    message: `no checkpoint signed by key ${keyId(pub)}: nothing vouches for this log (run "forge-audit checkpoint --key …")`,
  };
}

/** Takes a snapshot of the files, finds where to start, walks; returns the first bad. */
async function verifyFrom(files: LogFiles, path: string, o: WalkOptions): Promise<FirstBad | undefined> {
  const snap = await snapshot(files, o.takeLock);
  try {
    let start: WalkStart | undefined;
    if (o.from) {
      const s = await startAfter(files, snap, o.from);
      if ('reason' in s) return s;
      start = s;
      o.result.entries = o.from.entries;
      o.result.head = o.from.head;
    }
    return await walk(files, path, snap, start, o);
  } finally {
    await snap.active?.close();
  }
}
