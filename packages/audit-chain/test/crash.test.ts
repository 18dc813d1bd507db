import { createHash, randomBytes, randomInt } from 'node:crypto';
import { appendFileSync, copyFileSync, readFileSync } from 'node:fs';
import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { scaled, waitFor } from '@forge/test-utils';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type AuditLog, GENESIS_HASH, openAuditLog, verifyLog } from '../src/index.js';
import { type ChainEntry, checkAcks, expectCleanExit, readAcks, readChain, spawnWriter, splitLines } from './children.js';
import { tempDir } from './helpers.js';

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
const recoveredFiles = async (dir: string, base: string) => (await readdir(dir)).filter((n) => n.startsWith(`${base}.recovered-`)).sort();
/**
 * The lock options of a writer that may only get the lock by proving its holder dead
 * (the timeout scaled to the machine; the stale period stays far beyond it).
 */
const NO_STALENESS = { staleMs: 60_000, timeoutMs: scaled(3000) };

/** Random bytes without a line feed: what a torn write may leave after the last complete line. */
function tornBytes(n: number): Buffer {
  const b = randomBytes(n);
  for (let i = 0; i < b.length; i++) if (b[i] === 0x0a) b[i] = 0x0b;
  return b;
}

/** The lock directory `<lock>.<token>.tmp` that process `pid` staged (owner record written), if any. */
async function stagedBy(dir: string, lock: string, pid: number): Promise<string | undefined> {
  for (const name of await readdir(dir)) {
    if (!name.startsWith(`${lock}.`) || !name.endsWith('.tmp')) continue;
    try {
      if (JSON.parse(await readFile(join(dir, name, 'owner'), 'utf8')).pid === pid) return name;
    } catch {} // gone meanwhile, or its owner record not written yet
  }
  return undefined;
}

async function openForTest(path: string, options?: Parameters<typeof openAuditLog>[1]): Promise<AuditLog> {
  const log = await openAuditLog(path, options);
  onTestFinished(() => log.close());
  return log;
}

/** A log with `n` entries (of type `t.seed`), closed. */
async function seedLog(path: string, n: number): Promise<void> {
  const log = await openAuditLog(path);
  await Promise.all(Array.from({ length: n }, (_, i) => log.append('t.seed', { i, s: 'x'.repeat(randomInt(0, 50)) })));
  await log.close();
}

/** The line the library would append next to the log at `path` (made in a scratch copy). */
async function nextLine(path: string, scratchDir: string): Promise<Buffer> {
  const scratch = join(scratchDir, `scratch-${randomBytes(4).toString('hex')}.log`);
  copyFileSync(path, scratch);
  const log = await openAuditLog(scratch);
  await log.append('t.next', { n: randomInt(0, 1000) });
  await log.close();
  const { lines } = splitLines(readFileSync(scratch));
  return lines.at(-1) as Buffer;
}

/**
 * Checks SPEC.md section 6 after a repair: the entry right after the last complete line is an
 * `audit.repaired` entry naming the recovered file, which holds exactly the torn bytes.
 */
async function expectRepaired(path: string, entries: ChainEntry[], validLines: number, validBytes: number, torn: Buffer) {
  const dir = join(path, '..');
  const repaired = entries[validLines];
  expect(repaired?.type).toBe('audit.repaired');
  expect(repaired?.seq).toBe(validLines + 1);
  expect(repaired?.prev).toBe(validLines === 0 ? GENESIS_HASH : entries[validLines - 1]?.hash);
  expect(repaired?.data).toEqual({
    reason: 'torn_tail',
    bytes: torn.length,
    offset: validBytes,
    recovered: expect.stringMatching(new RegExp(`^${basename(path).replaceAll('.', '\\.')}\\.recovered-.+-\\d+$`)),
    sha256: sha256(torn),
  });
  expect(await recoveredFiles(dir, basename(path))).toContain(repaired?.data.recovered);
  expect((await readFile(join(dir, repaired?.data.recovered))).equals(torn)).toBe(true);
}

describe('SIGKILL of a writer at a random moment', () => {
  it('leaves a log that verifies (or has only a torn tail), keeps every acknowledged entry, and is repaired by the next writer', async () => {
    const dir = await tempDir();
    const iterations = 30;
    const logsOf = 5; // iterations per log: later writers open a log that earlier kills left behind
    let torn = 0;
    let lockLeftBehind = 0;
    for (let k = 0; k < iterations; k++) {
      const path = join(dir, `audit-${Math.floor(k / logsOf)}.log`);
      const base = basename(path);
      const w = spawnWriter(path, Number.POSITIVE_INFINITY, `c${k}`, {
        acks: join(dir, `c${k}.acks`),
        window: randomInt(1, 300),
        pad: randomInt(0, 3) * 600,
      });
      // Start the clock once the writer is appending, so the kill lands among appends.
      await waitFor(`writer c${k} to acknowledge an append`, async () => {
        if (w.child.exitCode !== null) throw new Error(`writer c${k} exited: ${w.stderr()}`);
        return (await readAcks(w.acksPath)).acks.length > 0 ? true : undefined;
      });
      // Lets time pass: the kill is to land at a random moment among the appends, which no event marks.
      await sleep(randomInt(20, 151));
      w.child.kill('SIGKILL');
      const exit = await w.exited;
      expect(exit, w.stderr()).toEqual({ code: null, signal: 'SIGKILL' });

      // The state the kill left: complete lines, then maybe a torn tail.
      const buf = await readFile(path);
      const { lines, rest } = splitLines(buf);
      const validBytes = buf.length - rest.length;
      const v = await verifyLog(path);
      if (rest.length === 0) {
        expect(v).toMatchObject({ ok: true, entries: lines.length });
      } else {
        torn++;
        expect(v).toMatchObject({
          ok: false,
          entries: lines.length,
          first_bad: { reason: 'torn_tail', seq: lines.length + 1, line: lines.length + 1, file: base },
        });
      }
      const { acks } = await readAcks(w.acksPath);
      const before = await readChain(path);
      expect(before.entries).toHaveLength(lines.length);
      expect(checkAcks(before.entries, acks)).toEqual([]);
      try {
        await stat(`${path}.lock`);
        lockLeftBehind++;
      } catch {}

      // The next writer repairs the log (when torn) and appends after it. If the dead writer
      // still held the lock, it must prove it dead: staleness would take a minute.
      const log = await openAuditLog(path, { lock: NO_STALENESS });
      try {
        await log.append('t.marker', { k });
      } finally {
        await log.close();
      }
      const after = await readChain(path);
      const repairedEntries = rest.length > 0 ? 1 : 0;
      expect(after.torn.length).toBe(0);
      expect(after.entries).toHaveLength(lines.length + repairedEntries + 1);
      expect(after.entries.slice(0, lines.length).map((e) => e.hash)).toEqual(before.entries.map((e) => e.hash));
      if (rest.length > 0) await expectRepaired(path, after.entries, lines.length, validBytes, rest);
      expect(after.entries.at(-1)).toMatchObject({ type: 't.marker', data: { k } });
      expect(await verifyLog(path)).toMatchObject({ ok: true, entries: after.entries.length });
      expect(checkAcks(after.entries, acks)).toEqual([]);
    }
    const allRecovered = (await readdir(dir)).filter((n) => n.includes('.recovered-'));
    expect(allRecovered).toHaveLength(torn);
    console.log(`crash loop: ${iterations} kills, ${torn} torn tails, ${lockLeftBehind} locks left held by the dead writer`);
  });
});

describe('torn tail repair (SPEC.md section 6), deterministic', () => {
  it.each([
    ['without', false],
    ['with', true],
  ])('openAuditLog repairs a torn tail as it opens, before any append (log %s a checkpoint)', async (_, checkpointed) => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    await seedLog(path, 3);
    if (checkpointed) {
      const cpLog = await openAuditLog(path);
      await cpLog.checkpoint();
      await cpLog.close();
    }
    const valid = readFileSync(path);
    const torn = tornBytes(40);
    appendFileSync(path, torn);

    await openForTest(path);
    // "A writer that opens the log ... checks the last byte": the repair is done by the open.
    const { entries, torn: left } = await readChain(path);
    expect(left.length).toBe(0);
    expect(entries).toHaveLength(4);
    await expectRepaired(path, entries, 3, valid.length, torn);
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 4 });
  });

  it('moves random torn tails aside byte for byte and records them in the chain', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    await seedLog(path, 5);
    for (let k = 0; k < 24; k++) {
      const valid = readFileSync(path);
      const validLines = splitLines(valid).lines.length;
      // Three shapes of torn tail: random bytes, a prefix of the genuine next line, and the whole
      // next line but for its line feed (complete bytes, yet never acknowledged: still torn).
      let torn: Buffer;
      if (k % 3 === 0) torn = tornBytes(randomInt(1, 600));
      else {
        const line = await nextLine(path, dir);
        torn = Buffer.from(line.subarray(0, k % 3 === 1 ? randomInt(1, line.length - 1) : line.length - 1));
      }
      appendFileSync(path, torn);
      expect((await verifyLog(path)).first_bad).toMatchObject({ reason: 'torn_tail', seq: validLines + 1, line: validLines + 1 });

      const log = await openAuditLog(path);
      const r = await log.append('t.after', { k });
      await log.close();
      expect(r.seq).toBe(validLines + 2);

      const { entries } = await readChain(path);
      expect(entries).toHaveLength(validLines + 2);
      expect(readFileSync(path).subarray(0, valid.length).equals(valid)).toBe(true);
      await expectRepaired(path, entries, validLines, valid.length, torn);
      expect(entries.at(-1)).toMatchObject({ type: 't.after', data: { k }, seq: r.seq, hash: r.hash });
      expect(await verifyLog(path)).toMatchObject({ ok: true, entries: validLines + 2 });
    }
    expect(await recoveredFiles(dir, 'audit.log')).toHaveLength(24);
  });

  it('repairs a log whose only content is a torn first line: the repair entry is entry 1, linked to genesis', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const torn = tornBytes(100);
    await writeFile(path, torn);
    expect((await verifyLog(path)).first_bad).toMatchObject({ reason: 'torn_tail', seq: 1, line: 1 });

    const log = await openForTest(path);
    const r = await log.append('t.after', {});
    expect(r.seq).toBe(2);
    const { entries } = await readChain(path);
    expect(entries.map((e) => e.type)).toEqual(['audit.repaired', 't.after']);
    await expectRepaired(path, entries, 0, 0, torn);
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: 2 });
  });
});

describe('a writer killed while it holds the lock', () => {
  /** Starts a writer whose first append hangs in its data sync, holding the lock, and waits for it. */
  async function hangingHolder(path: string, dir: string) {
    // The sync outlasts the waiters' lock timeout: the holder never releases in time by itself.
    const w = spawnWriter(path, 1, 'holder', { acks: join(dir, 'holder.acks'), hangDatasyncMs: scaled(5000) });
    await waitFor('the holder to be inside its data sync', async () => {
      if (w.child.exitCode !== null) throw new Error(`holder exited: ${w.stderr()}`);
      return (await readAcks(w.acksPath)).events.includes('datasync') ? true : undefined;
    });
    // The lock is held, and its owner record names the child.
    expect((await stat(`${path}.lock`)).isDirectory()).toBe(true);
    const owner = JSON.parse(await readFile(join(`${path}.lock`, 'owner'), 'utf8'));
    expect(owner.pid).toBe(w.pid);
    return w;
  }

  it('is proved dead at once by the next writer, which takes the lock without waiting for staleness', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    await seedLog(path, 2);
    const w = await hangingHolder(path, dir);
    w.child.kill('SIGKILL');
    expect(await w.exited).toEqual({ code: null, signal: 'SIGKILL' });
    expect((await stat(`${path}.lock`)).isDirectory()).toBe(true); // the dead holder never released it

    // staleMs 60 s, timeout 3 s, holder's sync 5 s (the last two scaled): success proves the holder was judged dead.
    const log = await openForTest(path, { lock: NO_STALENESS });
    const r = await log.append('t.after', { ok: true });
    await log.close();
    // The holder's line was written (not synced, never acknowledged) before the kill.
    const { entries } = await readChain(path);
    expect(entries.at(-1)).toMatchObject({ type: 't.after', seq: r.seq, hash: r.hash });
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: r.seq });
    expect((await readAcks(w.acksPath)).acks).toEqual([]);
    await expect(stat(`${path}.lock`)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('is taken over by a writer process that was already waiting for the lock', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    await seedLog(path, 2);
    const holder = await hangingHolder(path, dir);
    const waiter = spawnWriter(path, 10, 'waiter', { acks: join(dir, 'waiter.acks'), lock: NO_STALENESS });
    // It waits for the lock once it has staged its own lock directory (owner record naming it)
    // beside the lock the holder keeps: acquiring begins with that, and the first append takes it.
    await waitFor('the waiter to wait for the lock (its staged lock directory)', async () => {
      if (waiter.child.exitCode !== null) throw new Error(`the waiter exited: ${waiter.stderr()}`);
      return (await stagedBy(dir, 'audit.log.lock', waiter.pid)) !== undefined;
    });
    expect(JSON.parse(await readFile(join(`${path}.lock`, 'owner'), 'utf8')).pid).toBe(holder.pid);
    holder.child.kill('SIGKILL');
    await holder.exited;
    await expectCleanExit(waiter);

    const { entries } = await readChain(path);
    const { acks } = await readAcks(waiter.acksPath);
    expect(acks).toHaveLength(10);
    expect(checkAcks(entries, acks)).toEqual([]);
    expect(await verifyLog(path)).toMatchObject({ ok: true, entries: entries.length });
  });
});
