import { join } from 'node:path';
import { verifyLog } from '@forge/audit-chain';
import { beforeAll, describe, expect } from 'vitest';
import { asRoot, connect, py, requireCliAndSandbox } from './helpers.js';
import { tmpfsHome } from './tmpfs.js';

beforeAll(requireCliAndSandbox);

describe('forge serve (stdio) with the audit log on a filesystem that fills mid-session', () => {
  asRoot('answers audit_unavailable (isError, never ok), refuses forges, and takes calls again once an append succeeds', async () => {
    const h = tmpfsHome('forge-serve-audit-full-');
    const c = await connect(h);
    expect((await c.call('forge_tool', py('echo', 'print(json.dumps({"ok": True, "data": args}))'))).env.ok).toBe(true);
    expect((await c.call('echo', { n: 1 })).env).toMatchObject({ ok: true, data: { n: 1 } });

    h.fill();
    // tmpfs allocates whole pages: the log's last page may take a few more entries first.
    let refused: Awaited<ReturnType<typeof c.call>> | undefined;
    for (let i = 0; i < 60 && !refused; i++) {
      const r = await c.call('echo', { n: 2 });
      if (!r.env.ok) refused = r;
    }
    expect(refused, 'the audit log never reported a failed append on a full filesystem').toBeDefined();
    expect(refused?.result.isError).toBe(true);
    expect(refused?.env.error?.kind).toBe('audit_unavailable');
    expect(refused?.env.error?.message).toContain(`${join(h.auditDir, 'forge.log')} cannot be written (ENOSPC`);
    const forged = await c.call('forge_tool', py('other', 'print(json.dumps({"ok": True, "data": 1}))'));
    expect(forged.result.isError).toBe(true);
    expect(forged.env.error?.kind).toBe('audit_unavailable');
    expect((await c.call('forge_call', { name: 'echo', input: { n: 3 } })).env.error?.kind).toBe('audit_unavailable');

    h.free();
    expect((await c.call('echo', { n: 4 })).env).toMatchObject({ ok: true, data: { n: 4 } });
    await c.client.close();
    const v = await verifyLog(join(h.auditDir, 'forge.log'));
    expect(v.first_bad).toBeUndefined();
    expect(v.ok).toBe(true);
  });
});
