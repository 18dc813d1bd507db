// File-specific details of the file queue that the shared conformance suite cannot express:
// what on disk is and is not a job, modes, the record formats, and conflicts left alone.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { link, lstat, mkdir, readdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type ClaimedJob, type JobQueue, openFileQueue } from '../src/index.js';

let dirs: string[] = [];
const queues: JobQueue[] = [];
function fresh(): string {
  const d = mkdtempSync(join(tmpdir(), 'forge-queue-'));
  dirs.push(d);
  return d;
}
async function open(dir: string, options = {}): Promise<JobQueue> {
  const q = await openFileQueue(dir, options);
  queues.push(q);
  return q;
}
afterEach(async () => {
  for (const q of queues.splice(0)) await q.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  dirs = [];
});
const FAR = Date.now() + 3_600_000;
const mode = async (p: string) => (await lstat(p)).mode & 0o777;
const J = (id: string) => `${id}.req.json`;

describe('file queue on disk', () => {
  it('lays out the protocol directories with mode 0700 and writes every file 0600', async () => {
    const d = fresh();
    const root = join(d, 'q');
    const q = await open(root);
    for (const sub of ['', 'inbox', 'pending', 'lease', 'claimed', 'done', 'failed']) expect(await mode(join(root, sub))).toBe(0o700);
    await q.publish({ id: 'a', payload: { x: 1 } });
    expect(await mode(join(root, 'pending', J('a')))).toBe(0o600);
    const job = (await q.claim('w1')) as ClaimedJob;
    await q.note(job, 'half');
    expect(await mode(join(root, 'claimed', J('a')))).toBe(0o700);
    expect(await mode(join(root, 'claimed', J('a'), J('a')))).toBe(0o600);
    expect(await mode(join(root, 'lease', J('a')))).toBe(0o700);
    expect(await mode(join(root, 'lease', J('a'), 'worker'))).toBe(0o600);
    expect(await mode(join(root, 'lease', J('a'), 'note.json'))).toBe(0o600);
    const lease = JSON.parse(await readFile(join(root, 'lease', J('a'), 'worker'), 'utf8'));
    expect(lease).toMatchObject({ worker: 'w1', pid: process.pid, attempt: 1 });
    expect(typeof lease.host).toBe('string');
    expect(lease.expires_at).toBe(job.leaseExpiresAt);
    await q.finish(job, { status: 'done', payload: [1] });
    expect(await mode(join(root, 'done', J('a')))).toBe(0o600);
    expect(await mode(join(root, 'done', `${J('a')}.result`))).toBe(0o600);
    const result = JSON.parse(await readFile(join(root, 'done', `${J('a')}.result`), 'utf8'));
    expect(result).toMatchObject({ status: 'done', payload: [1], attempt: 1, worker: 'w1' });
    expect(typeof result.finished_at).toBe('number');
    const request = JSON.parse(await readFile(join(root, 'done', J('a')), 'utf8'));
    expect(request).toMatchObject({ id: 'a', payload: { x: 1 } });
    // Finished: the claim and the lease are gone, nothing is left in inbox/.
    expect(await readdir(join(root, 'claimed'))).toEqual([]);
    expect(await readdir(join(root, 'lease'))).toEqual([]);
    expect(await readdir(join(root, 'inbox'))).toEqual([]);
  });

  it('does not take symlinks, directories, FIFOs or foreign names in pending/ for jobs, and never follows a symlink', async () => {
    const d = fresh();
    const q = await open(d);
    const outside = join(fresh(), 'secret.req.json');
    await writeFile(outside, JSON.stringify({ id: 'sym', payload: 'stolen', published_at: 1, mono: '1' }));
    await symlink(outside, join(d, 'pending', J('sym')));
    await mkdir(join(d, 'pending', J('adir')));
    execFileSync('mkfifo', [join(d, 'pending', J('fifo'))]);
    for (const name of ['.hidden.req.json', 'a b.req.json', 'x.json', '-x.req.json', 'plain']) {
      await writeFile(join(d, 'pending', name), JSON.stringify({ id: name, payload: 1, published_at: 1, mono: '1' }));
    }
    await writeFile(join(d, 'pending', J('torn')), '{"id":"torn","pay');
    expect(await q.claim('w')).toBeUndefined();
    expect(await q.stats()).toMatchObject({ pending: 0, claimed: 0 });
    expect((await lstat(join(d, 'pending', J('sym')))).isSymbolicLink()).toBe(true);
    expect(await readFile(outside, 'utf8')).toContain('stolen');
    const report = await q.recover({ now: FAR });
    expect(report.conflicts.map((c) => c.id).sort()).toEqual(['adir', 'fifo', 'sym']);
    expect(report.conflicts.find((c) => c.id === 'sym')?.reason).toMatch(/symlink/);
    await q.publish({ id: 'real', payload: 1 });
    expect((await q.claim('w'))?.id).toBe('real');
  });

  it('leaves a claim whose lease is a directory (or a symlink) alone and reports it', async () => {
    const d = fresh();
    const a = await open(d, { leaseMs: 100 });
    await a.publish({ id: 'l', payload: 1 });
    await a.publish({ id: 's', payload: 1 });
    await a.claim('w');
    await a.claim('w');
    await a.close();
    const { rm } = await import('node:fs/promises');
    await rm(join(d, 'lease', J('l'), 'worker'));
    await mkdir(join(d, 'lease', J('l'), 'worker'));
    const target = join(fresh(), 'lease');
    await writeFile(target, JSON.stringify({ worker: 'x', token: 't', attempt: 1, expires_at: 0 }));
    await rm(join(d, 'lease', J('s'), 'worker'));
    await symlink(target, join(d, 'lease', J('s'), 'worker'));
    const b = await open(d, { leaseMs: 100 });
    const report = await b.recover({ now: FAR });
    expect(report.returned).toEqual([]);
    expect(report.conflicts).toEqual([
      { id: 'l', reason: expect.stringMatching(/lease\/l\.req\.json\/worker is a directory/) },
      { id: 's', reason: expect.stringMatching(/lease\/s\.req\.json\/worker is a symlink/) },
    ]);
    expect((await lstat(join(d, 'claimed', J('l'), J('l')))).isFile()).toBe(true);
    expect(await b.claim('w2')).toBeUndefined();
  });

  it('never writes or removes through a symlink planted as lease/J', async () => {
    const d = fresh();
    const q = await open(d);
    const elsewhere = fresh();
    await writeFile(join(elsewhere, 'keep'), 'precious');
    await q.publish({ id: 'v', payload: 1 });
    await symlink(elsewhere, join(d, 'lease', J('v')));
    expect(await q.claim('w')).toBeUndefined();
    expect(await readdir(elsewhere)).toEqual(['keep']);
    await writeFile(join(d, 'lease', 'w.req.json'), ''); // a file is no lease directory either
    const report = await q.recover({ now: FAR });
    expect(report.conflicts).toEqual([
      { id: 'v', reason: expect.stringMatching(/lease\/v\.req\.json is not a directory/) },
      { id: 'w', reason: expect.stringMatching(/lease\/w\.req\.json is not a directory/) },
    ]);
    expect(await readdir(elsewhere)).toEqual(['keep']);
    expect(await readFile(join(elsewhere, 'keep'), 'utf8')).toBe('precious');
  });

  it('never overwrites a result: a planted result makes finish a conflict and stays as it was', async () => {
    const d = fresh();
    const q = await open(d);
    await q.publish({ id: 'r', payload: 1 });
    const job = (await q.claim('w')) as ClaimedJob;
    const planted = JSON.stringify({ status: 'done', payload: 'first', attempt: 1, finished_at: 1, worker: 'other' });
    await writeFile(join(d, 'done', `${J('r')}.result`), planted);
    expect(await q.finish(job, { status: 'done', payload: 'second' })).toBe('conflict');
    expect(await readFile(join(d, 'done', `${J('r')}.result`), 'utf8')).toBe(planted);
    expect(await q.result('r')).toMatchObject({ payload: 'first' });
  });

  it('reports a request in two states and a result without its request, and touches neither', async () => {
    const d = fresh();
    const q = await open(d);
    await q.publish({ id: 'two', payload: 1 });
    await link(join(d, 'pending', J('two')), join(d, 'done', J('two')));
    await writeFile(
      join(d, 'failed', `${J('orphan')}.result`),
      JSON.stringify({ status: 'failed', payload: 1, attempt: 1, finished_at: 1, worker: 'w' }),
    );
    expect(await q.claim('w')).toBeUndefined();
    const report = await q.recover({ now: FAR });
    expect(report.conflicts).toEqual([
      { id: 'two', reason: expect.stringMatching(/pending and also finished/) },
      { id: 'orphan', reason: expect.stringMatching(/no request beside it/) },
    ]);
    await expect(q.publish({ id: 'orphan', payload: 1 })).rejects.toMatchObject({ code: 'job_exists' });
    expect((await lstat(join(d, 'pending', J('two')))).isFile()).toBe(true);
  });

  it('says which directory cannot be used (queue_unusable)', async () => {
    const d = fresh();
    await writeFile(join(d, 'file'), '');
    await expect(openFileQueue(join(d, 'file', 'q'))).rejects.toMatchObject({
      code: 'queue_unusable',
      message: expect.stringContaining(join(d, 'file', 'q')),
    });
    await mkdir(join(d, 'q'));
    await symlink(fresh(), join(d, 'q', 'pending'));
    await expect(openFileQueue(join(d, 'q'))).rejects.toMatchObject({
      code: 'queue_unusable',
      message: expect.stringMatching(/pending is not a directory/),
    });
    await writeFile(join(d, 'q2'), 'x');
    await expect(openFileQueue(join(d, 'q2'))).rejects.toMatchObject({ code: 'queue_unusable' });
  });

  it('takes any printable worker name (kept in the lease), refuses empty or control characters', async () => {
    const d = fresh();
    const q = await open(d);
    await q.publish({ id: 'a', payload: 1 });
    const job = (await q.claim('host-1:4242 worker/2')) as ClaimedJob;
    expect(JSON.parse(await readFile(join(d, 'lease', J('a'), 'worker'), 'utf8')).worker).toBe('host-1:4242 worker/2');
    await q.finish(job, { status: 'done', payload: 1 });
    await expect(q.claim('')).rejects.toMatchObject({ code: 'invalid_job' });
    await expect(q.claim('a\nb')).rejects.toMatchObject({ code: 'invalid_job' });
  });

  it('an onExhausted that throws leaves the job claimed for the next recovery, which fails it (never returns it)', async () => {
    const d = fresh();
    const q = await open(d, { leaseMs: 1000, maxAttempts: 1 });
    await q.publish({ id: 'e', payload: 1 });
    await q.claim('w');
    const boom = async () => {
      throw new Error('boom');
    };
    await expect(q.recover({ now: FAR, onExhausted: boom })).rejects.toThrow('boom');
    expect(await q.stats()).toMatchObject({ pending: 0, claimed: 1 });
    expect(await q.recover({ now: FAR + 10_000, onExhausted: async () => ({ gave_up: true }) })).toEqual({
      returned: [],
      failed: ['e'],
      conflicts: [],
    });
    expect(await q.result('e')).toMatchObject({ status: 'failed', payload: { gave_up: true }, attempt: 1 });
    expect(await q.claim('w')).toBeUndefined();
  });

  it('names the 16 MiB payload cap and the JSON pointer of a bad value', async () => {
    const q = await open(fresh());
    await expect(q.publish({ id: 'big', payload: 'x'.repeat(16 * 1024 * 1024) })).rejects.toThrow(/over the queue's cap of 16 MiB/);
    await expect(q.publish({ id: 'nan', payload: { a: [1, Number.NaN] } })).rejects.toThrow(
      'job nan payload at /a/1: NaN is not a JSON number',
    );
  });

  it('cleans temporaries a killed publish left in inbox/ once they are older than a lease', async () => {
    const d = fresh();
    const q = await open(d, { leaseMs: 1000 });
    await writeFile(join(d, 'inbox', '.tmp-req-1-abc'), 'partial');
    await writeFile(join(d, 'inbox', 'not-ours'), 'x');
    await q.recover();
    expect((await readdir(join(d, 'inbox'))).sort()).toEqual(['.tmp-req-1-abc', 'not-ours']);
    await q.recover({ now: FAR });
    expect(await readdir(join(d, 'inbox'))).toEqual(['not-ours']);
  });

  it('turns a file failure into io_error naming the path (inbox/ replaced by a file after opening)', async () => {
    const d = fresh();
    const q = await open(d);
    const { rm } = await import('node:fs/promises');
    await rm(join(d, 'inbox'), { recursive: true });
    await writeFile(join(d, 'inbox'), '');
    await expect(q.publish({ id: 'x', payload: 1 })).rejects.toMatchObject({
      code: 'io_error',
      message: expect.stringContaining(join(d, 'pending', J('x'))),
    });
    expect(await q.stats()).toMatchObject({ pending: 0 });
  });
});
