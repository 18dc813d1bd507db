import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { verifyLog } from '../src/index.js';
import { type Ack, checkAcks, expectCleanExit, readAcks, readChain, spawnWriter, startTogether } from './children.js';
import { tempDir } from './helpers.js';

describe('many writer processes', () => {
  it('8 processes × 2,000 concurrent appends form one chain holding every acknowledged entry once', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const writers = await startTogether(dir, (go) =>
      Array.from({ length: 8 }, (_, k) => spawnWriter(path, 2000, `w${k}`, { window: 50, go })),
    );
    await Promise.all(writers.map(expectCleanExit));

    const v = await verifyLog(path);
    expect(v).toMatchObject({ ok: true, entries: 16_000, segments: 1 });
    expect(v.first_bad).toBeUndefined();

    const { entries, torn } = await readChain(path);
    expect(torn.length).toBe(0);
    expect(entries).toHaveLength(16_000);
    expect(entries.at(-1)?.hash).toBe(v.head);
    expect(entries.every((e) => e.type === 't.write')).toBe(true);

    const acks: Ack[] = [];
    for (const w of writers) {
      const r = await readAcks(w.acksPath);
      expect(r.acks, `acks of ${w.id}`).toHaveLength(2000);
      acks.push(...r.acks);
    }
    expect(checkAcks(entries, acks)).toEqual([]);

    // Each writer's entries are in the log in the order it appended them, and the writers did
    // take turns (group commits interleave rather than one process writing everything at once).
    for (const w of writers) {
      const mine = entries.filter((e) => e.data.writer === w.id).map((e) => e.data.i);
      expect(mine).toEqual(Array.from({ length: 2000 }, (_, i) => i));
    }
    let switches = 0;
    for (let k = 1; k < entries.length; k++) if (entries[k]?.data.writer !== entries[k - 1]?.data.writer) switches++;
    expect(switches).toBeGreaterThan(7);

    // Nothing left behind: no lock, no staging directories, no recovered bytes.
    expect((await readdir(dir)).filter((n) => n.startsWith('audit.log.') && n !== 'audit.log.tlog')).toEqual([]);
  });

  it('two processes rotating mid-stream and two plain writers lose nothing', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    const n = 1500;
    const writers = await startTogether(dir, (go) => [
      spawnWriter(path, n, 'r0', { window: 50, rotateAt: 500, go }),
      spawnWriter(path, n, 'r1', { window: 50, rotateAt: 900, go }),
      spawnWriter(path, n, 'p0', { window: 50, go }),
      spawnWriter(path, n, 'p1', { window: 50, go }),
    ]);
    await Promise.all(writers.map(expectCleanExit));

    const v = await verifyLog(path);
    expect(v.first_bad).toBeUndefined();
    // Each rotation adds an audit.sealed entry and the next segment's audit.segment entry.
    expect(v).toMatchObject({ ok: true, entries: 4 * n + 4, segments: 3 });

    const { entries, torn, segments } = await readChain(path);
    expect(torn.length).toBe(0);
    expect(segments).toBe(3);
    expect(entries).toHaveLength(4 * n + 4);

    const acks: Ack[] = [];
    const rotations: string[] = [];
    for (const w of writers) {
      const r = await readAcks(w.acksPath);
      expect(r.acks, `acks of ${w.id}`).toHaveLength(n);
      acks.push(...r.acks);
      rotations.push(...r.events.filter((e) => e.startsWith('rotate:')));
    }
    expect(checkAcks(entries, acks)).toEqual([]);

    // The segment structure of SPEC.md section 8.
    const sealed = entries.filter((e) => e.type === 'audit.sealed');
    const started = entries.filter((e) => e.type === 'audit.segment');
    expect(sealed.map((e) => [e.file, e.data])).toEqual([
      ['audit.log.000001', { segment: 1 }],
      ['audit.log.000002', { segment: 2 }],
    ]);
    expect(started.map((e) => [e.file, e.data])).toEqual([
      ['audit.log.000002', { segment: 2, previous: 'audit.log.000001' }],
      ['audit.log', { segment: 3, previous: 'audit.log.000002' }],
    ]);
    for (const s of started) expect(entries[s.seq - 2]?.type).toBe('audit.sealed');
    // Each rotate() reported the segment it sealed and the entry count just after its header.
    expect(rotations.sort()).toEqual(started.map((s) => `rotate:${s.data.segment - 1}:${s.seq}`).sort());
  });
});
