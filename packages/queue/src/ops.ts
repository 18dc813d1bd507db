import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { QueueError } from './errors.js';
import {
  errno,
  ioError,
  kindOf,
  linkFile,
  list,
  mkdirExclusive,
  parseJson,
  readRegular,
  removeDir,
  renameIfThere,
  syncDir,
  syncDirs,
  tempName,
  unlinkFile,
  unlinkQuiet,
  writeNew,
} from './fsx.js';
import type { Ctx } from './layout.js';
import { checkId, checkJson, idOfName, requestName, serialise } from './names.js';
import { asLease, asRequest, type LeaseRecord, MAX_FILE_BYTES, type RequestRecord, type ResultRecord } from './records.js';
import type { JobRequest, JsonValue } from './types.js';

/** True when J has an entry in any state (pending, claimed, done, failed, or a result). */
export async function knownAnywhere(ctx: Ctx, J: string): Promise<boolean> {
  const { q } = ctx;
  const paths = [join(q.pending, J), join(q.claimed, J), join(q.done, J), join(q.failed, J)];
  paths.push(join(q.done, `${J}.result`), join(q.failed, `${J}.result`));
  for (const p of paths) if ((await kindOf(p)) !== 'missing') return true;
  return false;
}

/** Which finished-state entries J has (a request or a result in done/ or failed/). */
export async function terminalOf(ctx: Ctx, J: string) {
  const { q } = ctx;
  return {
    doneReq: (await kindOf(join(q.done, J))) !== 'missing',
    failedReq: (await kindOf(join(q.failed, J))) !== 'missing',
    doneRes: (await kindOf(join(q.done, `${J}.result`))) !== 'missing',
    failedRes: (await kindOf(join(q.failed, `${J}.result`))) !== 'missing',
  };
}

/**
 * publish: a temporary in inbox/, fsynced, then linked to pending/J (never replacing: EEXIST is
 * `job_exists`), the temporary unlinked and pending/ fsynced.
 */
export async function publishJob(ctx: Ctx, job: JobRequest): Promise<void> {
  if (typeof job !== 'object' || job === null) throw new QueueError('invalid_job', 'publish needs a job { id, payload }');
  const id = checkId(job.id);
  const payload = checkJson(job.payload, `job ${id} payload`);
  const J = requestName(id);
  const record: RequestRecord = { id, payload, published_at: ctx.now(), mono: process.hrtime.bigint().toString() };
  const bytes = serialise(record, `job ${id}`);
  const exists = () =>
    new QueueError('job_exists', `job ${id} was published to the queue ${ctx.q.root} before; job ids are unique: use a new id`);
  if (await knownAnywhere(ctx, J)) throw exists();
  const tmp = join(ctx.q.inbox, tempName('req'));
  const target = join(ctx.q.pending, J);
  try {
    await writeNew(tmp, bytes);
    ctx.step('publish.temp');
    try {
      linkFile(tmp, target);
    } catch (err) {
      if (errno(err) === 'EEXIST') {
        unlinkQuiet(tmp);
        throw exists();
      }
      throw err;
    }
    ctx.step('publish.link');
    unlinkFile(tmp);
    ctx.step('publish.unlink');
    await syncDir(ctx.q.pending);
    ctx.step('publish.sync');
  } catch (err) {
    throw ioError('publishing job into', target, err);
  }
}

/** The order key of a pending request. */
export interface PendingKey {
  publishedAt: number;
  mono: bigint;
}

/** Pending request names, oldest first; `cache` keeps the order keys already read (a name's request never changes). */
export async function pendingInOrder(ctx: Ctx, cache: Map<string, PendingKey>): Promise<[string, PendingKey][]> {
  const names = await list(ctx.q.pending);
  const out: [string, PendingKey][] = [];
  const seen = new Set<string>();
  for (const name of names) {
    const id = idOfName(name);
    if (!id) continue;
    seen.add(name);
    let key = cache.get(name);
    if (!key) {
      const r = await readRegular(join(ctx.q.pending, name), MAX_FILE_BYTES);
      const rec = r.kind === 'file' ? asRequest(parseJson(r.text), id) : undefined;
      if (!rec) continue; // a symlink, a directory, a torn or foreign file: not a job
      key = { publishedAt: rec.published_at, mono: BigInt(rec.mono) };
      cache.set(name, key);
    }
    out.push([name, key]);
  }
  for (const name of cache.keys()) if (!seen.has(name)) cache.delete(name);
  out.sort((a, b) => a[1].publishedAt - b[1].publishedAt || (a[1].mono < b[1].mono ? -1 : a[1].mono > b[1].mono ? 1 : 0));
  return out;
}

/** A claim this process won, with the lease it made durable. */
export interface WonClaim {
  request: RequestRecord;
  lease: LeaseRecord;
  note?: JsonValue;
}

/**
 * claim + lease for one request name: mkdir claimed/J (the arbitration), rename pending/J into it,
 * sync, then the lease lease/J/worker (temporary, fsync, link, sync). Undefined when another
 * worker won or J is not claimable.
 */
export async function claimOne(ctx: Ctx, J: string, worker: string): Promise<WonClaim | undefined> {
  const { q } = ctx;
  const id = idOfName(J) as string;
  const from = join(q.pending, J);
  if ((await kindOf(from)) !== 'file') return undefined;
  const t = await terminalOf(ctx, J);
  if (t.doneReq || t.failedReq || t.doneRes || t.failedRes) return undefined; // a conflict: recover() reports it
  const cdir = join(q.claimed, J);
  if (!(await mkdirExclusive(cdir))) return undefined;
  ctx.step('claim.mkdir');
  if (!(await renameIfThere(from, join(cdir, J)))) {
    await removeDir(cdir);
    await syncDir(q.claimed);
    return undefined;
  }
  ctx.step('claim.rename');
  const r = await readRegular(join(cdir, J), MAX_FILE_BYTES);
  const request = r.kind === 'file' ? asRequest(parseJson(r.text), id) : undefined;
  if (!request) {
    // Swapped underneath: left claimed without a lease, for recover() to report.
    await syncDirs(q.claimed, cdir, q.pending);
    return undefined;
  }
  const ldir = join(q.lease, J);
  const newLeaseDir = await mkdirExclusive(ldir);
  ctx.step('lease.mkdir');
  if (!newLeaseDir && (await kindOf(ldir)) !== 'dir') {
    // Never write through a symlink: the claim stays without a lease, and recover() reports it.
    await syncDirs(q.claimed, cdir, q.pending);
    return undefined;
  }
  const names = await list(ldir);
  for (const stale of ['worker', 'finishing']) {
    // Left by a holder that renewed after its lease was recovered: history, not a lease.
    if (names.includes(stale)) await renameIfThere(join(ldir, stale), join(ldir, `stale-${randomBytes(6).toString('hex')}`));
  }
  const lost = names.filter((n) => n.startsWith('lost-')).length;
  const note = await readNote(ldir);
  const lease: LeaseRecord = {
    worker,
    pid: process.pid,
    host: ctx.host,
    attempt: lost + 1,
    token: randomBytes(9).toString('hex'),
    expires_at: ctx.now() + ctx.leaseMs,
  };
  const tmp = join(ldir, tempName('lease'));
  // The claim move is synced while the lease is written to its temporary (one fsync round);
  // lease/J/worker itself is only linked once both are durable.
  await Promise.all([
    syncDirs(q.claimed, cdir, q.pending, ...(newLeaseDir ? [q.lease] : [])).then(() => ctx.step('claim.sync')),
    writeNew(tmp, JSON.stringify(lease)).then(() => ctx.step('lease.temp')),
  ]);
  try {
    linkFile(tmp, join(ldir, 'worker'));
  } catch (err) {
    unlinkQuiet(tmp);
    throw ioError('creating the lease', join(ldir, 'worker'), err);
  }
  ctx.step('lease.link');
  unlinkFile(tmp);
  await syncDir(ldir);
  ctx.step('lease.sync');
  return { request, lease, ...(note === undefined ? {} : { note }) };
}

/** The progress note kept in lease/J, if any. */
export async function readNote(ldir: string): Promise<JsonValue | undefined> {
  const r = await readRegular(join(ldir, 'note.json'), MAX_FILE_BYTES);
  if (r.kind !== 'file') return undefined;
  const v = parseJson(r.text) as { note?: JsonValue } | undefined;
  return v && typeof v === 'object' && 'note' in v ? (v.note as JsonValue) : undefined;
}

/** The lease in lease/J/<name>, if it is a regular file holding one. */
export async function readLease(ctx: Ctx, J: string, name = 'worker'): Promise<LeaseRecord | undefined> {
  const r = await readRegular(join(ctx.q.lease, J, name), 64 * 1024);
  return r.kind === 'file' ? asLease(parseJson(r.text)) : undefined;
}

/**
 * finish, from a request in claimed/J/J: a temporary result in inbox/, fsynced, linked to
 * <state>/J.result (never replacing: false when a result exists), then the request renamed beside
 * it, then the claim and the lease removed (files, then directories), each parent synced.
 */
export async function finishRequest(ctx: Ctx, J: string, state: 'done' | 'failed', result: ResultRecord): Promise<boolean> {
  const { q } = ctx;
  const dir = q[state];
  const bytes = serialise(result, `the result of job ${idOfName(J)}`);
  const tmp = join(q.inbox, tempName('res'));
  await writeNew(tmp, bytes);
  ctx.step('finish.temp');
  try {
    linkFile(tmp, join(dir, `${J}.result`));
  } catch (err) {
    unlinkQuiet(tmp);
    if (errno(err) === 'EEXIST') return false;
    throw ioError('writing the result', join(dir, `${J}.result`), err);
  }
  ctx.step('finish.link');
  unlinkFile(tmp);
  await syncDir(dir);
  ctx.step('finish.sync');
  await moveBeside(ctx, J, state);
  return true;
}

/** The rest of finish once the result is durable: the request beside it, then the claim and lease removed. */
export async function moveBeside(ctx: Ctx, J: string, state: 'done' | 'failed'): Promise<void> {
  const { q } = ctx;
  const cdir = join(q.claimed, J);
  if (await renameIfThere(join(cdir, J), join(q[state], J))) {
    ctx.step('finish.rename');
    await syncDirs(q[state], cdir);
    ctx.step('finish.sync-request');
  }
  await Promise.all([
    removeClaim(ctx, J).then(() => ctx.step('finish.claim-removed')),
    removeLease(ctx, J).then(() => ctx.step('finish.lease-removed')),
  ]);
}

/** Removes claimed/J once its request has left it: its files (a cancel marker, temporaries), then the directory. */
export async function removeClaim(ctx: Ctx, J: string): Promise<void> {
  const cdir = join(ctx.q.claimed, J);
  if ((await kindOf(cdir)) !== 'dir') return; // never remove files through a symlink
  await removeFilesIn(cdir, (n) => n !== J);
  if (await removeDir(cdir)) await syncDir(ctx.q.claimed);
}

/** Removes lease/J: every file in it (lease, lost attempts, note), then the directory. */
export async function removeLease(ctx: Ctx, J: string): Promise<void> {
  const ldir = join(ctx.q.lease, J);
  if ((await kindOf(ldir)) !== 'dir') return; // never remove files through a symlink
  await removeFilesIn(ldir, () => true);
  if (await removeDir(ldir)) await syncDir(ctx.q.lease);
}

// The unlinks are made durable by the sync of the parent after the directory's removal.
async function removeFilesIn(dir: string, which: (name: string) => boolean): Promise<void> {
  for (const n of await list(dir)) {
    if (!which(n)) continue;
    try {
      unlinkFile(join(dir, n));
    } catch (err) {
      const code = errno(err);
      // A directory planted where a file belongs stays: the dir is then not empty and recover() reports it.
      if (code !== 'ENOENT' && code !== 'EISDIR' && code !== 'EPERM') throw ioError('removing', join(dir, n), err);
    }
  }
}

/** Moves a request from claimed/J/J back to pending/J and removes the claim directory. */
export async function returnToPending(ctx: Ctx, J: string): Promise<boolean> {
  const { q } = ctx;
  const cdir = join(q.claimed, J);
  if (!(await renameIfThere(join(cdir, J), join(q.pending, J)))) return false;
  ctx.step('recover.return');
  await syncDirs(q.pending, cdir);
  ctx.step('recover.sync');
  await removeClaim(ctx, J);
  ctx.step('recover.claim-removed');
  return true;
}

/** The reason in a cancel marker claimed/J/cancel, or undefined when there is none. */
export async function readCancel(ctx: Ctx, J: string): Promise<string | undefined> {
  const r = await readRegular(join(ctx.q.claimed, J, 'cancel'), 64 * 1024);
  if (r.kind !== 'file') return undefined;
  const v = parseJson(r.text) as { reason?: unknown } | undefined;
  return typeof v?.reason === 'string' ? v.reason : 'cancelled';
}

/** Writes the cancel marker claimed/J/cancel (temporary, fsync, link without replacing, sync). */
export async function writeCancel(ctx: Ctx, J: string, reason: string): Promise<'written' | 'exists' | 'gone'> {
  const cdir = join(ctx.q.claimed, J);
  const tmp = join(cdir, tempName('cancel'));
  try {
    await writeNew(tmp, JSON.stringify({ reason, at: ctx.now() }));
  } catch (err) {
    if (errno(err) === 'ENOENT') return 'gone';
    throw ioError('writing the cancel marker in', cdir, err);
  }
  try {
    linkFile(tmp, join(cdir, 'cancel'));
  } catch (err) {
    if (errno(err) === 'EEXIST') return 'exists';
    if (errno(err) === 'ENOENT') return 'gone';
    throw ioError('writing the cancel marker in', cdir, err);
  } finally {
    unlinkQuiet(tmp);
  }
  await syncDir(cdir);
  return 'written';
}

/**
 * cancel of a pending job: win the claim arbitration (mkdir claimed/J), leave the cancel marker,
 * move the request in, then finish it as cancelled into failed/. 'lost' when a worker won.
 */
export async function cancelPending(ctx: Ctx, J: string, reason: string): Promise<'cancelled' | 'lost'> {
  const { q } = ctx;
  const cdir = join(q.claimed, J);
  if (!(await mkdirExclusive(cdir))) return 'lost';
  await writeCancel(ctx, J, reason);
  if (!(await renameIfThere(join(q.pending, J), join(cdir, J)))) {
    await removeClaim(ctx, J);
    return 'lost';
  }
  await syncDirs(q.claimed, cdir, q.pending);
  const lost = (await list(join(q.lease, J))).filter((n) => n.startsWith('lost-')).length;
  const ok = await finishRequest(ctx, J, 'failed', {
    status: 'cancelled',
    payload: { reason },
    attempt: lost,
    finished_at: ctx.now(),
    worker: null,
  });
  if (!ok) await moveBeside(ctx, J, (await kindOf(join(q.done, `${J}.result`))) === 'file' ? 'done' : 'failed');
  return 'cancelled';
}
