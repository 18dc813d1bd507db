// The result cache in the database serves only what the database's audit log recorded: the check
// is the runner's (ResultCache.lookup), above every store, and reads this log through entries().
import { createForge } from '@forge/runner';
import { describe, expect, it, onTestFinished } from 'vitest';
import { openPostgresAuditLog, postgresCacheStore } from '../src/index.js';
import { tempDir, usePostgres } from './helpers.js';

const pg = usePostgres();

/** Deterministic, so cacheable. */
const square = {
  name: 'square',
  description: 'the square of n',
  runtime: 'python3',
  input_schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] },
  impl: 'import json, sys\nn = json.load(sys.stdin)["n"]\nprint(json.dumps({"ok": True, "data": {"n": n, "sq": n * n}}))\n',
  meta: { deterministic: true },
};

describe('the result cache over PostgreSQL, checked against the audit log in the same database', () => {
  it('a forge_cache row edited to other valid JSON is a miss: the call runs again, and forge.cache_mismatch is in the log', async () => {
    const { pool } = await pg.database();
    const audit = await openPostgresAuditLog(pool, { migrate: false });
    const forge = await createForge({
      env: {},
      home: await tempDir(),
      project: await tempDir(),
      audit,
      cacheStore: postgresCacheStore(pool),
    });
    onTestFinished(async () => {
      await forge.close();
      await audit.close();
    });
    expect((await forge.forgeTool(square)).ok).toBe(true);
    const first = await forge.callTool('square', { n: 12 });
    expect(first).toMatchObject({ ok: true, data: { n: 12, sq: 144 }, meta: { cache: 'miss' } });
    const row = (await pool.query<{ key: string; entry: string }>('SELECT key, entry FROM forge_cache')).rows[0];
    if (!row) throw new Error('the answer was not stored');
    const forged = JSON.parse(row.entry) as { envelope: { data: { sq: number } } };
    forged.envelope.data.sq = 145;
    await pool.query('UPDATE forge_cache SET entry = $1 WHERE key = $2', [JSON.stringify(forged), row.key]);

    const again = await forge.callTool('square', { n: 12 });
    expect(again).toMatchObject({ ok: true, data: { n: 12, sq: 144 }, meta: { cache: 'miss' } });
    const lines = (await pool.query<{ line: string }>('SELECT line FROM forge_audit_entries ORDER BY seq')).rows;
    const entries = lines.map((r) => JSON.parse(r.line) as { type: string; data: Record<string, unknown> });
    expect(entries.filter((e) => e.type === 'forge.cache_mismatch').map((e) => e.data)).toEqual([
      expect.objectContaining({
        name: 'square',
        cache_key: row.key,
        seed_run: first.meta.run_id,
        reason: 'output_differs',
        store: 'postgres',
      }),
    ]);
    // The rerun's answer replaced the row: the next call is a hit of it.
    expect((await forge.callTool('square', { n: 12 })).meta).toMatchObject({ cache: 'hit', seed_run: again.meta.run_id });
  });
});
