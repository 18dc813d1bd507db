import { readFileSync } from 'node:fs';
import { leafHash } from '@forge/audit-chain';
import { describe, expect, it } from 'vitest';
import type { Envelope } from '../src/index.js';
import { py, setup } from './helpers.js';

/**
 * A call's receipt (receipts.ts): every answer names its own audit entry in `meta.audit` (`seq`,
 * `index` = `seq - 1`, `leaf_hash`), which is that line's leaf in the log's Merkle tree; a tool
 * cannot hand in a receipt of its own.
 */

/** The log's line of entry `seq` (the log has one segment here), without its newline. */
function lineOf(log: string, seq: number): Buffer {
  const lines = readFileSync(log).toString('utf8').split('\n');
  return Buffer.from(lines[seq - 1] as string, 'utf8');
}

function receiptOf(envelope: Envelope): { seq: number; index: number; leaf_hash: string } {
  return envelope.meta?.audit as { seq: number; index: number; leaf_hash: string };
}

describe('call receipts', () => {
  it('name the call’s own entry and its leaf hash, for a run, a cache hit and a refusal; a tool’s own meta.audit is dropped', async () => {
    const fx = await setup();
    const spoof = { seq: 1, index: 0, leaf_hash: '0'.repeat(64) };
    const t = py('math.sq', `print(json.dumps({"ok": True, "data": args["n"] ** 2, "meta": {"audit": ${JSON.stringify(spoof)}}}))`, {
      input_schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false },
      meta: { deterministic: true },
    });
    expect((await fx.forge.forgeTool(t)).ok).toBe(true);
    const ran = await fx.forge.callTool('math.sq', { n: 3 });
    const hit = await fx.forge.callTool('math.sq', { n: 3 });
    const refused = await fx.forge.callTool('math.sq', { n: 'three' });
    expect(ran).toMatchObject({ ok: true, data: 9, meta: { cache: 'miss' } });
    expect(hit).toMatchObject({ ok: true, data: 9, meta: { cache: 'hit' } });
    expect(refused).toMatchObject({ ok: false, error: { kind: 'validation_failed' } });
    const receipts = [ran, hit, refused].map(receiptOf);
    expect(new Set(receipts.map((r) => r.seq)).size).toBe(3);
    for (const [i, r] of receipts.entries()) {
      expect(r).not.toEqual(spoof);
      expect(r.index).toBe(r.seq - 1);
      const entry = fx.audit().find((e) => e.seq === r.seq);
      expect(entry?.type).toBe('forge.called');
      if (i < 2) expect(entry?.data.run_id).toBe([ran, hit][i]?.meta?.run_id);
      expect(r.leaf_hash).toBe(leafHash(lineOf(fx.forge.paths.auditLog, r.seq)).toString('hex'));
    }
  });
});
