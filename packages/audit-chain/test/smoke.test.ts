import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openAuditLog, verifyLog } from '../src/index.js';
import { tempDir } from './helpers.js';

describe('append and verify', () => {
  it('appends durable entries that verify', async () => {
    const dir = await tempDir();
    const path = join(dir, 'audit.log');
    await using log = await openAuditLog(path);
    const r = await Promise.all([log.append('a.b', { x: 1 }), log.append('a.c', [1, 'two'])]);
    expect(r.map((x) => x.seq)).toEqual([1, 2]);
    const v = await verifyLog(path);
    expect(v).toMatchObject({ ok: true, entries: 2, head: r[1]?.hash });
  });
});
