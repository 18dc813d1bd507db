import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { kindOf, list, mtimeOf, parseJson, readRegular, renameIfThere, syncDir, unlinkQuiet } from './fsx.js';
import type { Ctx } from './layout.js';
import { checkJson, idOfName } from './names.js';
import { finishRequest, moveBeside, readCancel, readNote, removeClaim, removeLease, returnToPending, terminalOf } from './ops.js';
import { asLease, asRequest, MAX_FILE_BYTES } from './records.js';
import type { ExhaustedJob, JsonValue, RecoverReport } from './types.js';

/** How recover() runs: `now` judges leases; `full` also scans pending/, done/ and failed/ for conflicts. */
export interface RecoverRun {
  now: number;
  full: boolean;
  onExhausted?: (job: ExhaustedJob) => Promise<JsonValue>;
}

/**
 * recover: returns abandoned claims (claim and lease evidence both present, the lease expired, no
 * pending or finished entry of the same job) to pending, or past maxAttempts finishes them as
 * failed; completes finishes whose result is already durable; reports what disagrees.
 */
export async function recoverQueue(ctx: Ctx, run: RecoverRun): Promise<RecoverReport> {
  const report: RecoverReport = { returned: [], failed: [], conflicts: [] };
  const { q } = ctx;
  // Temporaries of publishes and finishes that died before their link: never acknowledged.
  for (const n of await list(q.inbox)) {
    if (!n.startsWith('.tmp-')) continue;
    const m = await mtimeOf(join(q.inbox, n));
    if (m !== undefined && m < run.now - ctx.leaseMs) unlinkQuiet(join(q.inbox, n));
  }
  for (const name of await list(q.claimed)) {
    const id = idOfName(name);
    if (!id) continue;
    if ((await kindOf(join(q.claimed, name))) !== 'dir') {
      report.conflicts.push({ id, reason: `claimed/${name} is not a directory; remove it once you know what it is` });
      continue;
    }
    await recoverClaim(ctx, name, id, run, report);
  }
  for (const name of await list(q.lease)) {
    const id = idOfName(name);
    if (!id || (await kindOf(join(q.claimed, name))) !== 'missing') continue;
    if ((await kindOf(join(q.lease, name))) !== 'dir') {
      if (run.full) report.conflicts.push({ id, reason: `lease/${name} is not a directory (a symlink?); remove it by hand` });
      continue;
    }
    const t = await terminalOf(ctx, name);
    if (t.doneReq || t.failedReq)
      await removeLease(ctx, name); // a finish that died before removing its lease
    else if ((await kindOf(join(q.pending, name))) === 'missing' && run.full) {
      report.conflicts.push({ id, reason: `lease/${name} has no claim, pending or finished request; inspect and remove it` });
    }
  }
  if (run.full) await scanConflicts(ctx, report);
  return report;
}

async function recoverClaim(ctx: Ctx, J: string, id: string, run: RecoverRun, report: RecoverReport): Promise<void> {
  const { q } = ctx;
  const cdir = join(q.claimed, J);
  const ldir = join(q.lease, J);
  const old = async (path: string) => {
    const m = await mtimeOf(path);
    return m === undefined || m < run.now - ctx.leaseMs;
  };
  const conflict = (reason: string) => report.conflicts.push({ id, reason });
  const reqKind = await kindOf(join(cdir, J));
  const t = await terminalOf(ctx, J);
  if (reqKind === 'missing') {
    // A finish that died after moving the request: complete its cleanup.
    if (t.doneReq || t.failedReq) return void (await moveBeside(ctx, J, t.doneReq ? 'done' : 'failed'));
    // An arbitration that died before (or recovery that died after) moving the request.
    if ((await old(cdir)) && (await old(ldir))) await removeClaim(ctx, J);
    return;
  }
  if (reqKind !== 'file') return void conflict(`claimed/${J}/${J} is not a regular file; remove it by hand`);
  if ((await kindOf(join(q.pending, J))) !== 'missing') return void conflict(`${J} is both pending and claimed`);
  if (t.doneReq || t.failedReq) return void conflict(`${J} is both claimed and ${t.doneReq ? 'done' : 'failed'}`);
  const ldirKind = await kindOf(ldir);
  if (ldirKind !== 'dir' && ldirKind !== 'missing') return void conflict(`lease/${J} is not a directory (a symlink?); remove it by hand`);
  const leaseFile = await readRegular(join(ldir, 'worker'), 64 * 1024);
  if (leaseFile.kind === 'not_regular') return void conflict(`lease/${J}/worker is ${leaseFile.what}, not a lease file`);
  const sealed = await readRegular(join(ldir, 'finishing'), 64 * 1024);
  const active = leaseFile.kind === 'file' ? leaseFile : sealed.kind === 'file' ? sealed : undefined;
  const lease = active ? asLease(parseJson(active.text)) : undefined;
  if (active && !lease) return void conflict(`the lease of ${J} in lease/${J} is not a lease record`);
  if (t.doneRes || t.failedRes) {
    // The result is durable: the finish only has to move the request beside it (once its holder is gone).
    if (lease && lease.expires_at > run.now) return;
    return void (await moveBeside(ctx, J, t.doneRes ? 'done' : 'failed'));
  }
  const cancel = await readCancel(ctx, J);
  if (!lease) {
    // Claimed but no lease was ever made durable: execution never started, so it may go back as it was.
    if (!(await old(cdir)) || !(await old(ldir))) return;
    return settle(ctx, J, id, run, report, cancel, null);
  }
  if (lease.expires_at > run.now) return;
  const src = leaseFile.kind === 'file' ? 'worker' : 'finishing';
  // The rename is the arbitration between recoverers (and with a holder that seals to finish).
  if (!(await renameIfThere(join(ldir, src), join(ldir, `lost-${lease.attempt}-${randomBytes(4).toString('hex')}`)))) return;
  ctx.step('recover.lost');
  await syncDir(ldir);
  await settle(ctx, J, id, run, report, cancel, lease.worker);
}

/**
 * The rest of a recovery once the claim has no live lease: cancelled (a marker is there), failed
 * (the lost attempts reached maxAttempts), or back to pending. A recovery that dies (or whose
 * onExhausted throws) here is taken up again by the next one on the same path.
 */
async function settle(
  ctx: Ctx,
  J: string,
  id: string,
  run: RecoverRun,
  report: RecoverReport,
  cancel: string | undefined,
  worker: string | null,
): Promise<void> {
  const { q } = ctx;
  const cdir = join(q.claimed, J);
  const ldir = join(q.lease, J);
  const attempts = (await list(ldir)).filter((n) => n.startsWith('lost-')).length;
  if (cancel !== undefined) return void (await cancelHeld(ctx, J, cancel, attempts));
  if (attempts >= ctx.maxAttempts) {
    const r = await readRegular(join(cdir, J), MAX_FILE_BYTES);
    const request = r.kind === 'file' ? asRequest(parseJson(r.text), id) : undefined;
    const note = await readNote(ldir);
    const exhausted: ExhaustedJob = { id, payload: request?.payload ?? null, attempts, ...(note === undefined ? {} : { note }) };
    const payload = run.onExhausted
      ? checkJson(await run.onExhausted(exhausted), `onExhausted's result for job ${id}`)
      : { error: 'worker_lost', attempts };
    await finishRequest(ctx, J, 'failed', { status: 'failed', payload, attempt: attempts, finished_at: ctx.now(), worker });
    report.failed.push(id);
    return;
  }
  if (await returnToPending(ctx, J)) report.returned.push(id);
}

async function cancelHeld(ctx: Ctx, J: string, reason: string, attempt: number): Promise<void> {
  await finishRequest(ctx, J, 'failed', { status: 'cancelled', payload: { reason }, attempt, finished_at: ctx.now(), worker: null });
}

async function scanConflicts(ctx: Ctx, report: RecoverReport): Promise<void> {
  const { q } = ctx;
  for (const name of await list(q.pending)) {
    const id = idOfName(name);
    if (!id) continue;
    const k = await kindOf(join(q.pending, name));
    if (k !== 'file')
      report.conflicts.push({
        id,
        reason: `pending/${name} is ${k === 'dir' ? 'a directory' : 'not a regular file (a symlink?)'}: not a job; remove it`,
      });
    const t = await terminalOf(ctx, name);
    if (t.doneReq || t.failedReq || t.doneRes || t.failedRes) report.conflicts.push({ id, reason: `${name} is pending and also finished` });
  }
  for (const state of ['done', 'failed'] as const) {
    for (const name of await list(q[state])) {
      if (!name.endsWith('.result')) continue;
      const J = name.slice(0, -'.result'.length);
      const id = idOfName(J);
      if (!id) continue;
      if ((await kindOf(join(q[state], J))) !== 'missing' || (await kindOf(join(q.claimed, J, J))) !== 'missing') continue;
      report.conflicts.push({
        id,
        reason: `${state}/${name} has no request beside it (${state}/${J}): an incomplete pair to reconcile by hand`,
      });
    }
  }
}
