// Invariant 1, authority (docs/security.md): anything computed under one caller's authority is
// reused for another caller only when that authority (the digest of the effective grant) is equal.
import { renameSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { py, target } from './helpers.js';

/** A private service on the host's loopback: only a persona granted loopback may reach it. */
async function privateService(body: string): Promise<number> {
  const server = createServer((_req, res) => res.end(body));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
  return (server.address() as AddressInfo).port;
}

/** Deterministic, so cacheable: the answer is the page, or why it could not be fetched. */
const fetcher = py(
  'fetch_page',
  `import urllib.request
try:
    with urllib.request.urlopen(args["url"], timeout=5) as r:
        print(json.dumps({"ok": True, "data": {"body": r.read().decode()}}))
except Exception as e:
    print(json.dumps({"ok": True, "data": {"body": None, "error": type(e).__name__}}))`,
  {
    input_schema: { type: 'object', properties: { url: { type: 'string' } }, required: ['url'] },
    meta: { deterministic: true },
  },
);

const policy = {
  persona_sandbox_overrides: { insider: { network: 'allow', loopback: 'allow' }, twin: { network: 'allow', loopback: 'allow' } },
};

describe('invariant 1: authority', () => {
  it('break 2: a persona without the loopback grant is never answered from the cache with the granted persona’s private page', async () => {
    const port = await privateService('payroll: 1,000,000');
    const t = await target({ userPolicy: policy });
    expect((await t.forge.forgeTool(fetcher, { persona: 'insider' })).ok).toBe(true);
    const url = `http://127.0.0.1:${port}/`;
    const inside = await t.forge.callTool('fetch_page', { url }, { persona: 'insider' });
    expect(inside.ok && inside.data).toEqual({ body: 'payroll: 1,000,000' });
    const outside = await t.forge.callTool('fetch_page', { url }, { persona: 'outsider' });
    expect(outside.meta.cache).not.toBe('hit');
    expect(JSON.stringify(outside)).not.toContain('payroll');
    // Equal authority shares: a second persona with the same grant is answered from the cache.
    const twin = await t.forge.callTool('fetch_page', { url }, { persona: 'twin' });
    expect(twin.meta.cache).toBe('hit');
  });

  it('break 2, the other way: the ungranted persona’s answer never reaches the granted one, stored or in flight', async () => {
    const port = await privateService('the real page');
    const t = await target({ userPolicy: policy });
    expect((await t.forge.forgeTool(fetcher, { persona: 'insider' })).ok).toBe(true);
    const url = `http://127.0.0.1:${port}/`;
    // At once: a single flight shared across authorities would hand one answer to both.
    const [outside, inside] = await Promise.all([
      t.forge.callTool('fetch_page', { url }, { persona: 'outsider' }),
      t.forge.callTool('fetch_page', { url }, { persona: 'insider' }),
    ]);
    expect(outside.ok && (outside.data as { body: unknown }).body).toBeNull();
    expect(inside.ok && inside.data).toEqual({ body: 'the real page' });
    // Stored: the outsider's cached answer (an ok envelope with no page) is not the insider's.
    const again = await t.forge.callTool('fetch_page', { url }, { persona: 'insider' });
    expect(again.ok && again.data).toEqual({ body: 'the real page' });
  });

  it('a policy change to a persona’s grant stops it sharing what it computed under the old grant', async () => {
    const port = await privateService('before the change');
    const t = await target({ userPolicy: policy });
    expect((await t.forge.forgeTool(fetcher, { persona: 'insider' })).ok).toBe(true);
    const url = `http://127.0.0.1:${port}/`;
    expect((await t.forge.callTool('fetch_page', { url }, { persona: 'twin' })).meta.cache).not.toBe('hit');
    // The operator takes twin's loopback away: the policy is live at the next call.
    const tmp = join(t.home, 'policy.json.tmp');
    writeFileSync(tmp, JSON.stringify({ persona_sandbox_overrides: { insider: policy.persona_sandbox_overrides.insider } }));
    renameSync(tmp, join(t.home, 'policy.json'));
    const after = await t.forge.callTool('fetch_page', { url }, { persona: 'twin' });
    expect(after.meta.cache).not.toBe('hit');
    expect(JSON.stringify(after)).not.toContain('before the change');
  });
});
