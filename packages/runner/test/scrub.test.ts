import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDirSync } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { redactBytes, secretList } from '../src/redact.js';
import { StreamRedactor, scrubArtifacts } from '../src/scrub.js';

const SECRETS = secretList(
  new Map([
    ['LONG', 'Zq7vXw3KpL9mN2bR8sT4yU6c'],
    ['SHORT', 'Hj5%'],
    ['WIDE', 'Kö9xWqÄ7m'],
  ]),
);

describe('StreamRedactor', () => {
  it('gives the same bytes as redacting the whole buffer, however the stream is cut into chunks', () => {
    // A seeded generator: the same texts and cuts on every run.
    let seed = 7;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const pieces = ['ab', ' ', '\n', 'Zq7v', 'Kö9', ...SECRETS.map(([, v]) => v)];
    for (let round = 0; round < 300; round++) {
      const text = Array.from({ length: 1 + rand(40) }, () => pieces[rand(pieces.length)]).join('');
      const whole = Buffer.from(text);
      const s = new StreamRedactor(SECRETS);
      const out: Buffer[] = [];
      for (let at = 0; at < whole.length; ) {
        const n = 1 + rand(9);
        out.push(...s.push(whole.subarray(at, at + n), false));
        at += n;
      }
      out.push(...s.push(Buffer.alloc(0), true));
      expect(Buffer.concat(out).toString(), text).toBe(redactBytes(whole, SECRETS).toString());
    }
  });
});

describe('scrubArtifacts', () => {
  it('renames a directory whose name holds a secret and rewrites the files inside it', async () => {
    const d = tempDirSync();
    mkdirSync(join(d, 'dir-Hj5%'));
    writeFileSync(join(d, 'dir-Hj5%', 'f'), 'x Hj5% y');
    const r = await scrubArtifacts(d, SECRETS, { maxBytes: 1 << 20, maxEntries: 100 });
    expect(readdirSync(d)).toEqual(['dir-<redacted:SHORT>']);
    expect(readFileSync(join(d, 'dir-<redacted:SHORT>', 'f'), 'utf8')).toBe('x <redacted:SHORT> y');
    expect(r).toEqual({
      files: [{ path: 'dir-<redacted:SHORT>/f', replaced: { SHORT: 1 } }],
      renamed: ['dir-<redacted:SHORT>'],
      removed: [],
      scanned_bytes: 8,
    });
  });

  it('removes what lies past its byte or entry budget instead of keeping it unsearched', async () => {
    const d = tempDirSync();
    writeFileSync(join(d, 'a'), 'Zq7vXw3KpL9mN2bR8sT4yU6c');
    writeFileSync(join(d, 'b'), 'x'.repeat(100));
    writeFileSync(join(d, 'c'), 'small');
    const bytes = await scrubArtifacts(d, SECRETS, { maxBytes: 50, maxEntries: 100 });
    expect(readdirSync(d)).toEqual(['a', 'c']);
    expect(bytes.removed).toEqual([{ path: 'b', reason: 'past the 50 bytes searched for secret values' }]);
    expect(readFileSync(join(d, 'a'), 'utf8')).toBe('<redacted:LONG>');

    const e = tempDirSync();
    for (const n of ['1', '2', '3']) writeFileSync(join(e, n), 'Hj5%');
    const entries = await scrubArtifacts(e, SECRETS, { maxBytes: 1 << 20, maxEntries: 2 });
    expect(existsSync(join(e, '3'))).toBe(false);
    expect(entries.removed).toEqual([{ path: '3', reason: 'more than 2 entries' }]);
    expect(entries.files.map((f) => f.path)).toEqual(['1', '2']);
  });

  it('leaves a directory without secret values untouched and rewrites nothing', async () => {
    const d = tempDirSync();
    writeFileSync(join(d, 'plain'), 'nothing here');
    const r = await scrubArtifacts(d, SECRETS, { maxBytes: 1 << 20, maxEntries: 100 });
    expect(r).toEqual({ files: [], renamed: [], removed: [], scanned_bytes: 12 });
    expect(readdirSync(d)).toEqual(['plain']);
  });
});
