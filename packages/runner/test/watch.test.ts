import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { scaled } from '@forge/test-utils';
import { describe, expect, it, vi } from 'vitest';
import type { ToolsChanged } from '../src/index.js';
import { example, okData, setup } from './helpers.js';

describe('watch: tools another process changes', () => {
  it('a forge made by another process is reported through toolsChanged and callable at once', async () => {
    const fx = await setup({ forge: { watch: true } });
    const changes: ToolsChanged[] = [];
    fx.forge.on('toolsChanged', (c) => changes.push(c));
    expect((await fx.forge.listTools()).map((t) => t.tool.name)).toEqual([]);

    // A second engine in its own process, over the same home and project.
    const dist = fileURLToPath(new URL('../dist/index.js', import.meta.url));
    const spec = await example('fib');
    const child = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const { createForge } = await import(${JSON.stringify(dist)});
         const forge = await createForge({ env: {}, home: ${JSON.stringify(fx.home)}, project: ${JSON.stringify(fx.forge.paths.project)} });
         const r = await forge.forgeTool(${JSON.stringify(spec)});
         await forge.close();
         process.exit(r.ok ? 0 : 1);`,
      ],
      { stdio: ['ignore', 'inherit', 'inherit'] },
    );
    expect(await new Promise((r) => child.on('close', r))).toBe(0);

    await vi.waitFor(() => expect(changes.flatMap((c) => c.names)).toContain('fib'), { timeout: scaled(5000), interval: 20 });
    expect(changes.find((c) => c.names.includes('fib'))?.scopes).toEqual(['project']);
    expect((await fx.forge.listTools()).map((t) => t.tool.name)).toEqual(['fib']);
    expect(okData(await fx.forge.callTool('fib', { n: 12 }))).toEqual({ n: 12, fib: '144' });
  });

  it('without watch, a forge elsewhere is not reported (a one-shot process does not watch)', async () => {
    const fx = await setup();
    const changes: ToolsChanged[] = [];
    fx.forge.on('toolsChanged', (c) => changes.push(c));
    const other = await fx.reopen();
    expect((await other.forgeTool(await example('fib'))).ok).toBe(true);
    // Lets time pass: a watching engine would have reported the forge by now; one that does not
    // watch, as it must not, gives no event to wait for.
    await new Promise((r) => setTimeout(r, scaled(300)));
    expect(changes).toEqual([]);
  });
});
