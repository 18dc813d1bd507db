// Invariants 1 and 7 for gateway upstreams (docs/security.md): an upstream connection and every
// notification it sends is shared only by callers of equal authority, and what an upstream sends
// passes forge's rules (events capped per call, as a forged tool's are).
import { chmodSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ToolEvent } from '@forge/runner';
import { waitFor } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { hostileServer, scratchDir, target } from './helpers.js';

const policy = { persona_sandbox_overrides: { insider: { network: 'allow', loopback: 'allow' } } };

describe('gateway upstreams: authority and vetting', () => {
  it('break 4: a log line an upstream sends during another persona’s call never reaches this persona’s call in flight', async () => {
    const gate = scratchDir();
    chmodSync(gate, 0o755); // as root, the upstream runs as the sandbox uid and must read it
    const t = await target({ userPolicy: policy, servers: { evil: hostileServer({ HOSTILE_DIR: gate }, [{ path: gate, mode: 'ro' }]) } });
    const approved = await t.gateway?.approve('evil', ['wait_log', 'echo_log'], 'operator');
    expect(approved, JSON.stringify(approved)).toMatchObject({ ok: true });
    const seen: ToolEvent[] = [];
    const waiting = t.forge.callTool('evil.wait_log', {}, { persona: 'insider', onEvent: (e) => seen.push(e) });
    await waitFor('the insider’s call to be running', () => seen.length > 0, { timeoutMs: 60_000 });
    const other = await t.forge.callTool('evil.echo_log', { card: '4111-1111-1111-1111' }, { persona: 'outsider' });
    expect(other.ok, JSON.stringify(other)).toBe(true);
    writeFileSync(join(gate, 'go'), '');
    const done = await waiting;
    expect(done.ok, JSON.stringify(done)).toBe(true);
    expect(JSON.stringify(seen)).not.toContain('4111');
  });

  it('an upstream’s log flood is capped per call (1000 delivered), the rest counted in the run manifest', async () => {
    const t = await target({ servers: { evil: hostileServer() } });
    expect(await t.gateway?.approve('evil', ['flood'], 'operator')).toMatchObject({ ok: true });
    const seen: ToolEvent[] = [];
    const r = await t.forge.callTool('evil.flood', {}, { onEvent: (e) => seen.push(e) });
    expect(r.ok, JSON.stringify(r)).toBe(true);
    expect(seen.length).toBeLessThanOrEqual(1000);
    const runs = join(t.project, '.forge', 'runs');
    const dir = readdirSync(runs).find((d) => d.endsWith(`_${r.meta.run_id as string}`)) as string;
    const manifest = JSON.parse(readFileSync(join(runs, dir, 'run_manifest.json'), 'utf8')) as {
      events?: { delivered: number; dropped: { over_limit: number } };
    };
    expect(manifest.events?.delivered).toBe(seen.length);
    expect((manifest.events?.delivered ?? 0) + (manifest.events?.dropped.over_limit ?? 0)).toBe(3000);
  });

  it('break 9: links to file:///etc/shadow and a resource posing as a forge run are refused, not passed through', async () => {
    const t = await target({ servers: { evil: hostileServer() } });
    expect(await t.gateway?.approve('evil', ['links'], 'operator')).toMatchObject({ ok: true });
    const r = await t.forge.callTool('evil.links', {});
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.kind).toBe('output_invalid');
      expect(r.error.message).toContain('file:///etc/shadow');
    }
    expect(JSON.stringify(r)).not.toContain('planted');
  });

  it('break 9: a server with a rw bind or network cannot call its tools read-only or closed-world; without them its word stands', async () => {
    const out = scratchDir();
    const t = await target({
      servers: {
        calm: hostileServer(),
        writer: hostileServer({}, [{ path: out, mode: 'rw' }]),
        online: { ...hostileServer(), network: { allow_domains: ['example.com'] } },
      },
    });
    for (const s of ['calm', 'writer', 'online']) expect(await t.gateway?.approve(s, ['wipe'], 'operator')).toMatchObject({ ok: true });
    const listed = new Map((await t.forge.listSourced()).map((s) => [s.name, s.annotations]));
    expect(listed.get('calm.wipe')).toMatchObject({ readOnlyHint: true, destructiveHint: false, openWorldHint: false });
    expect(listed.get('writer.wipe')).toMatchObject({ readOnlyHint: false, destructiveHint: true });
    expect(listed.get('online.wipe')).toMatchObject({ readOnlyHint: true, openWorldHint: true });
  });

  it('break 9: x.a__b and x__a.b are one wire name: the second approval is refused, naming both, never dropped silently', async () => {
    const t = await target({ servers: { x: hostileServer(), x__a: hostileServer() } });
    expect(await t.gateway?.approve('x', ['a__b'], 'operator')).toMatchObject({ ok: true });
    const second = await t.gateway?.approve('x__a', ['b'], 'operator');
    expect(second).toMatchObject({ ok: false, kind: 'name_taken' });
    expect(second && !second.ok && second.message).toContain('"x.a__b"');
    const names = (await t.forge.listSourced()).map((s) => s.name);
    expect(names).toContain('x.a__b');
    expect(names).not.toContain('x__a.b');
  });
});
