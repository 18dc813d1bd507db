import { readdirSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Bytes, type LogSource, verifyLog } from '../src/web/verify.js';

/** The audit log's test vectors: every verdict the spec names, with what a verifier must say. */
const VECTORS = join(import.meta.dirname, '../../audit-chain/vectors');
const expected = JSON.parse(readFileSync(join(VECTORS, 'expected.json'), 'utf8')) as {
  cases: Record<string, { log: string; key_pub: string | null; expect: Record<string, unknown> }>;
};

/** A vector's directory as the page sees a log: names and bytes. */
export function dirSource(dir: string, base: string): LogSource {
  let names: string[] = [];
  try {
    names = readdirSync(dir);
  } catch {
    names = [];
  }
  return {
    base,
    names,
    read: async (name) => {
      try {
        return new Uint8Array(await readFile(join(dir, name))) as Bytes;
      } catch {
        return undefined;
      }
    },
  };
}

describe('the page verifier over the audit log test vectors', () => {
  for (const [name, c] of Object.entries(expected.cases)) {
    it(`${name}: the verdict SPEC.md gives`, async () => {
      const dir = join(VECTORS, name);
      const key = c.key_pub ? readFileSync(join(dir, c.key_pub), 'utf8') : undefined;
      const v = await verifyLog(dirSource(dir, c.log), key ? { publicKey: key } : {});
      const got: Record<string, unknown> = { ok: v.ok, entries: v.entries, head: v.head };
      if (v.first_bad) got.first_bad = v.first_bad;
      expect(got).toEqual(c.expect);
    });
  }
});
