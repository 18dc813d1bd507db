import { describe, expect, test } from 'vitest';
import { spawnUnsandboxed } from '../src/spawn.js';
import { ChildTransport } from '../src/transport.js';
import { restartDelay } from '../src/upstream.js';
import { fixtureEntry, gatewayWith, requireBwrap } from './fixtures/harness.js';

requireBwrap();

describe('the stdio transport', () => {
  test('a message over the bound stops the upstream and closes the transport naming the bound', async () => {
    const child = await spawnUnsandboxed({
      sandboxed: false,
      command: process.execPath,
      args: ['-e', 'process.stdout.write("x".repeat(3 << 20)); setInterval(() => {}, 1000)'],
      env: { PATH: process.env.PATH ?? '' },
      cwd: '/tmp',
    });
    const t = new ChildTransport(child, { label: 'gateway server "big"', maxMessageBytes: 1 << 20 });
    const errors: string[] = [];
    const closed = new Promise<void>((resolve) => {
      t.onclose = () => resolve();
    });
    t.onerror = (e) => errors.push(e.message);
    await t.start();
    await closed;
    expect(errors).toEqual([
      `gateway server "big": it wrote a message over ${1 << 20} bytes (the gateway's bound per message); it was stopped`,
    ]);
    expect((await child.exited).reason).toBe('killed');
  });

  test('messages split across chunks and several per chunk are framed by newlines; a bad line is reported, not fatal', async () => {
    const script = [
      'const m = (id) => JSON.stringify({ jsonrpc: "2.0", id, result: {} });',
      'process.stdout.write(m(1).slice(0, 10));',
      'setTimeout(() => process.stdout.write(m(1).slice(10) + "\\n" + "not json\\n" + m(2) + "\\r\\n" + m(3) + "\\n"), 50);',
    ].join('\n');
    const child = await spawnUnsandboxed({ sandboxed: false, command: process.execPath, args: ['-e', script], env: {}, cwd: '/tmp' });
    const t = new ChildTransport(child, { label: 'x' });
    const ids: unknown[] = [];
    const errors: string[] = [];
    const closed = new Promise<void>((resolve) => {
      t.onclose = () => resolve();
    });
    t.onmessage = (m) => ids.push((m as { id?: unknown }).id);
    t.onerror = (e) => errors.push(e.message);
    await t.start();
    await closed;
    expect(ids).toEqual([1, 2, 3]);
    expect(errors).toEqual(['x: the upstream wrote a line that is not a JSON-RPC message']);
  });
});

describe('restarts', () => {
  test('backoff: none after the first failure, then 250 ms doubling to 30 s', () => {
    expect([1, 2, 3, 4, 5, 8, 20].map(restartDelay)).toEqual([0, 250, 500, 1000, 2000, 16000, 30000]);
  });
});

describe('listing bounds', () => {
  test('at most 1000 tools are taken from an upstream; the rest are skipped and recorded once', async () => {
    const h = await gatewayWith({ many: fixtureEntry({ FIXTURE_TOOLS: '1000' }) });
    const states = await h.gateway.tools('many');
    expect(Array.isArray(states) && states.length).toBe(1000);
    const skipped = h.host.entries.filter((e) => e.type === 'gateway.tool_skipped' && e.data.why === 'past the first 1000 tools');
    // The fixture lists its own tools first, then t0…t999: the last of those are past the bound.
    const names = skipped.map((e) => e.data.tool);
    expect(names.length).toBeGreaterThan(0);
    expect(names.at(-1)).toBe('t999');
    expect(names.every((n) => /^t9\d\d$/.test(String(n)))).toBe(true);
    expect(new Set(names).size).toBe(names.length);
  });
});
