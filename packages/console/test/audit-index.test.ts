import { appendFileSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { openAuditLog } from '@forge/audit-chain';
import { tempDir } from '@forge/test-utils';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AuditIndex } from '../src/audit-index.js';
import { sealedNumbers } from '../src/web/verify.js';

/**
 * The console's index of a file log pages exactly the lines the files hold, in seq order, through
 * appends, rotations and reads at any moment between them; a torn last line is not a row until it
 * is whole; a log replaced under it is read again from its start.
 */

/** Every whole line of the log's segments, in order. */
function lines(dir: string): string[] {
  const names = readdirSync(dir);
  const order = [...sealedNumbers('audit.log', names).map((n) => `audit.log.${String(n).padStart(6, '0')}`), 'audit.log'];
  const out: string[] = [];
  for (const name of order) {
    let text: string;
    try {
      text = readFileSync(join(dir, name), 'utf8');
    } catch {
      continue;
    }
    const whole = text.slice(0, text.lastIndexOf('\n') + 1);
    out.push(...whole.split('\n').slice(0, -1));
  }
  return out;
}

/** Every entry the index pages, oldest first, walking its pages of `limit`. */
async function paged(index: AuditIndex, limit: number): Promise<string[]> {
  const out: string[] = [];
  let before: number | undefined;
  for (;;) {
    const page = await index.entries({ limit, ...(before !== undefined ? { before } : {}) });
    out.push(...page.rows.map((r) => r.text));
    if (page.next === undefined) break;
    before = page.next;
  }
  return out.reverse();
}

type Step = { kind: 'append'; n: number; call: boolean } | { kind: 'rotate' } | { kind: 'read' };

const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('append' as const), n: fc.integer({ min: 1, max: 7 }), call: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('rotate' as const) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('read' as const) }) },
);

describe('the console audit index', () => {
  it('property: through appends, rotations and reads between them, read in pieces of any size, the pages hold exactly the lines of the files', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(step, { minLength: 1, maxLength: 12 }),
        fc.integer({ min: 1, max: 9 }),
        fc.integer({ min: 1, max: 700 }),
        async (steps, limit, readBytes) => {
          const dir = await tempDir('forge-console-index-');
          const log = await openAuditLog(join(dir, 'audit.log'), { tree: false });
          // Reads of a few bytes to a few lines: lines cut by a read are carried into the next.
          const index = new AuditIndex(dir, 'audit.log', { readBytes });
          let calls = 0;
          try {
            for (const st of steps) {
              if (st.kind === 'append')
                for (let i = 0; i < st.n; i++) {
                  await log.append(
                    st.call ? 'forge.called' : 'user.note',
                    st.call ? { name: 'echo', ok: i % 2 === 0, kind: 'timeout', duration_ms: i } : { i },
                  );
                  if (st.call) calls++;
                }
              else if (st.kind === 'rotate') await log.rotate();
              else await index.refresh();
            }
          } finally {
            await log.close();
          }
          const want = lines(dir);
          expect(await paged(index, limit)).toEqual(want);
          const page = await index.entries({ limit: 500 });
          expect(page.rows.map((r) => r.seq)).toEqual(want.map((_, i) => want.length - i));
          expect((await index.calls({ limit: 500 })).total).toBe(calls);
          rmSync(dir, { recursive: true, force: true });
        },
      ),
      { numRuns: 40 },
    );
  });

  it('a torn last line is no row until it is whole; a log replaced under the index is read again from its start', async () => {
    const dir = await tempDir('forge-console-index-');
    const path = join(dir, 'audit.log');
    const log = await openAuditLog(path, { tree: false });
    await log.append('user.note', { a: 1 });
    await log.append('user.note', { a: 2 });
    await log.close();
    const index = new AuditIndex(dir, 'audit.log');
    await index.refresh();
    expect(index.size).toBe(2);
    const whole = readFileSync(path, 'utf8').split('\n')[1] as string;
    appendFileSync(path, whole.slice(0, 40));
    await index.refresh();
    expect(index.size).toBe(2);
    appendFileSync(path, `${whole.slice(40)}\n`);
    await index.refresh();
    expect((await index.entries({ limit: 1 })).rows[0]).toMatchObject({ seq: 3, line: 3, text: whole });

    // Another log moved into its place (another inode): read again, from its first line.
    const other = join(dir, 'other');
    mkdirSync(other, { mode: 0o700 });
    const fresh = await openAuditLog(join(other, 'audit.log'), { tree: false });
    await fresh.append('user.only', { b: 1 });
    await fresh.close();
    renameSync(join(other, 'audit.log'), path);
    await index.refresh();
    expect(index.size).toBe(1);
    expect((await index.entries({})).rows.map((r) => r.type)).toEqual(['user.only']);
  });
});
