import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type AuditEntry, type AuditLog, encodeEntry, type JsonValue, openAuditLog } from '@forge/audit-chain';
import { describe, expect, it, onTestFinished } from 'vitest';
import { AuditedRuns, type AuditSource } from '../src/auditedRuns.js';

/** A fresh file log in a scratch directory (closed and removed when the test ends). */
async function scratchLog(name = 'forge.log'): Promise<{ log: AuditLog; path: string; dir: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'forge-runner-test-runs-'));
  const path = join(dir, name);
  const log = await openAuditLog(path);
  onTestFinished(async () => {
    await log.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { log, path, dir };
}

const answer = (n: number) => ({
  cache_key: n.toString(16).padStart(64, '0'),
  output_digest: `sha256:${n.toString(16).padStart(64, 'a')}`,
});

/** A cacheable call's entry, as record.ts writes it (the fields AuditedRuns reads, and some it does not). */
const called = (runId: string, n: number) => ({ ok: true, name: 'fib', run_id: runId, cache: 'miss', ...answer(n), policy: 'sha256:p' });

/** `count` entries that record no cacheable answer: other events, failed calls, hits, calls that are not cached. */
async function filler(log: AuditLog, count: number): Promise<void> {
  const kinds: [string, JsonValue][] = [
    ['policy.reloaded', { digest: 'sha256:p' }],
    ['forge.called', { ok: false, name: 'fib', run_id: 'x', kind: 'timeout' }],
    ['forge.called', { ok: true, name: 'fib', run_id: 'y', cache: 'hit', seed_run: 'z' }],
    ['forge.called', { ok: true, name: 'roll', run_id: 'w', cache: 'off' }],
  ];
  await Promise.all(Array.from({ length: count }, (_, i) => log.append(...(kinds[i % kinds.length] as [string, JsonValue]))));
}

describe('AuditedRuns: what the audit log recorded of cacheable answers', () => {
  it('finds a run recorded long before the head, reading the engine’s file from its end, and the same through entries()', async () => {
    const { log, path } = await scratchLog();
    await log.append('forge.called', called('run-old', 1));
    await filler(log, 5000);
    await log.append('forge.called', called('run-new', 2));
    for (const source of [
      { log, file: path },
      { log, file: undefined },
    ] satisfies AuditSource[]) {
      const runs = new AuditedRuns(source);
      expect(await runs.find('run-new')).toEqual(answer(2));
      expect(await runs.find('run-old')).toEqual(answer(1));
      // Hits, failures and calls that are not cached record no answer.
      for (const id of ['x', 'y', 'w', 'nobody']) expect(await runs.find(id)).toBeUndefined();
    }
  });

  it('a run recorded after the last read, by another writer of the log, is read then; notes answer without reading', async () => {
    const { log, path } = await scratchLog();
    await filler(log, 10);
    const runs = new AuditedRuns({ log, file: path });
    expect(await runs.find('later')).toBeUndefined();
    const other = await openAuditLog(path);
    onTestFinished(() => other.close());
    await other.append('forge.called', called('later', 3));
    expect(await runs.find('later')).toEqual(answer(3));
    runs.note('mine', answer(4));
    expect(await runs.find('mine')).toEqual(answer(4));
  });

  it('concurrent lookups share the reads: every one gets its answer', async () => {
    const { log, path } = await scratchLog();
    for (let i = 0; i < 40; i++) {
      await log.append('forge.called', called(`run-${i}`, i));
      await filler(log, 100);
    }
    const runs = new AuditedRuns({ log, file: path });
    const found = await Promise.all(Array.from({ length: 40 }, (_, i) => runs.find(`run-${39 - i}`)));
    expect(found).toEqual(Array.from({ length: 40 }, (_, i) => answer(39 - i)));
  });

  it('a log rewritten between two reads (a consistent chain, another history) is refused: entries must link to those read before', async () => {
    const { log, path, dir } = await scratchLog();
    await log.append('forge.called', called('run-old', 1));
    await filler(log, 3000);
    await log.append('forge.called', called('run-new', 2));
    const runs = new AuditedRuns({ log, file: path });
    expect(await runs.find('run-new')).toEqual(answer(2));
    // Another history of the same length, hash-consistent from its first entry to its head.
    const forged = await openAuditLog(join(dir, 'forged.log'));
    await forged.append('forge.called', called('run-old', 9));
    await filler(forged, 3000);
    await forged.append('forge.called', called('run-new', 2));
    await forged.close();
    renameSync(join(dir, 'forged.log'), path);
    await expect(runs.find('run-old')).rejects.toThrow(/^audit entry \d+ of .* does not link to the entries read before it/);
  });

  it('an entry edited in place, its own hash recomputed, is not read past (log_corrupt)', async () => {
    const { log, path } = await scratchLog();
    await log.append('forge.called', called('run-old', 1));
    await filler(log, 50);
    const text = readFileSync(path, 'utf8');
    const cut = text.indexOf('\n') + 1;
    const first = JSON.parse(text.slice(0, cut)) as AuditEntry;
    // The line encoded again with another answer: its own hash is right, entry 2's prev is not.
    const edited = encodeEntry({ ...first, data: { ...(first.data as Record<string, JsonValue>), ...answer(9) } });
    writeFileSync(path, edited.line + text.slice(cut));
    const runs = new AuditedRuns({ log, file: path });
    await expect(runs.find('run-old')).rejects.toMatchObject({ code: 'log_corrupt' });
  });
});
