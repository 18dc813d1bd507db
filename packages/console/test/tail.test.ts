import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { type AuditLog, openAuditLog } from '@forge/audit-chain';
import { tempDir, waitFor } from '@forge/test-utils';
import { afterEach, describe, expect, it } from 'vitest';
import { AuditIndex } from '../src/audit-index.js';
import { LogFollower } from '../src/tail.js';

/**
 * The audit page's live tail sends each entry the log gains to each page once, from the entry the
 * page says it has: nothing appended while a page connects is lost, and nothing another route's
 * read of the index took in first either.
 */

let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
});

async function setup(
  entries: number,
  o: { watch?: boolean } = {},
): Promise<{ log: AuditLog; index: AuditIndex; follower: LogFollower; origin: string }> {
  const dir = await tempDir('forge-console-tail-');
  const log = await openAuditLog(join(dir, 'audit.log'), { tree: false });
  for (let i = 0; i < entries; i++) await log.append('user.note', { i });
  const index = new AuditIndex(dir, 'audit.log');
  await index.refresh();
  // Not watching (a directory that is not there): the follower's slow poll alone reads the log.
  const follower = new LogFollower(index, o.watch === false ? join(dir, 'not-there') : dir);
  const server: Server = createServer((req, res) => {
    const after = new URL(req.url ?? '/', 'http://x').searchParams.get('after');
    follower.add(req, res, after === null ? undefined : Number(after));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanup.push(async () => {
    follower.close();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    await log.close();
  });
  return { log, index, follower, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

/** Follows the stream at `url`: the seqs of the entries it sent so far. */
async function follow(url: string): Promise<number[]> {
  const seqs: number[] = [];
  const ac = new AbortController();
  cleanup.push(async () => ac.abort());
  const res = await fetch(url, { signal: ac.signal });
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  let text = '';
  void (async () => {
    for (;;) {
      const r = await reader.read().catch(() => ({ done: true as const, value: undefined }));
      if (r.done) return;
      text += Buffer.from(r.value).toString();
      for (let end = text.indexOf('\n\n'); end >= 0; end = text.indexOf('\n\n')) {
        const frame = text.slice(0, end);
        text = text.slice(end + 2);
        const data = /^event: entry\ndata: (.*)$/m.exec(frame);
        if (data) seqs.push((JSON.parse(data[1] as string) as { seq: number }).seq);
      }
    }
  })();
  return seqs;
}

describe('the live tail', () => {
  it('sends the entries after the one a page names, then each one appended, once', async () => {
    const { log, origin } = await setup(5);
    const seqs = await follow(`${origin}/?after=2`);
    await waitFor('entries 3 to 5', () => seqs.length >= 3);
    await log.append('user.note', { i: 5 });
    await waitFor('entry 6', () => seqs.length >= 4);
    expect(seqs).toEqual([3, 4, 5, 6]);
  });

  it('a page that names no entry gets those appended from then on', async () => {
    const { log, origin } = await setup(3);
    const seqs = await follow(origin);
    const other = await follow(`${origin}/?after=3`);
    await log.append('user.note', { i: 3 });
    await waitFor('entry 4 on both streams', () => seqs.length >= 1 && other.length >= 1);
    expect([seqs, other]).toEqual([[4], [4]]);
  });

  it('an entry another reader of the index took in first is still sent', async () => {
    // The follower only polls here, so the other read surely takes the entry in first.
    const { log, index, origin } = await setup(2, { watch: false });
    const seqs = await follow(`${origin}/?after=2`);
    // (fetch answered: the stream's headers came, so the follower holds it)
    await log.append('user.note', { i: 2 });
    // As a page of entries does: it reads what the log gained before the tail's own pass.
    expect((await index.entries({ limit: 10 })).rows.map((r) => r.seq)).toEqual([3, 2, 1]);
    await waitFor('entry 3', () => seqs.length >= 1);
    expect(seqs).toEqual([3]);
  });
});
