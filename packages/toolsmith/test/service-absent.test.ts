/**
 * `service_absent`: a configured gateway server that cannot run is an operator signal, kept apart
 * from `missing_tool` and never authored (a real gateway, a real failed start).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGateway } from '@forge/gateway';
import { createForge } from '@forge/runner';
import { describe, expect, it } from 'vitest';
import { createToolsmith } from '../src/index.js';
import { GOVERNED, requireSandbox } from './helpers.js';

describe('service_absent', () => {
  it('a gateway server that cannot start becomes a service_absent gap: the cycle signals it to the operator and it cannot be proposed', async () => {
    await requireSandbox();
    const root = await mkdtemp(join(tmpdir(), 'forge-toolsmith-absent-'));
    try {
      const home = join(root, 'home');
      const project = join(root, 'project');
      mkdirSync(join(project, '.forge'), { recursive: true, mode: 0o700 });
      mkdirSync(home, { recursive: true, mode: 0o700 });
      writeFileSync(
        join(project, '.forge', 'policy.json'),
        JSON.stringify({ toolsmith: { ...GOVERNED.toolsmith, gap_recurrence_threshold: 1 } }),
      );
      const workspaceFile = join(project, '.forge', 'gateway.json');
      writeFileSync(workspaceFile, JSON.stringify({ servers: { ghost: { command: join(root, 'no-such-server') } } }));
      const gateway = createGateway({ workspaceFile, gatewayDir: join(home, 'gateway') });
      const forge = await createForge({ home, project, env: {}, sources: [gateway] });
      const smith = createToolsmith({ forge, onWarning: () => {} });
      try {
        // An operator lists the server's tools to approve them: it must start, and cannot.
        expect(await gateway.tools('ghost')).toMatchObject({ ok: false });
        await smith.gaps.flush();
        const rows = smith.gaps.records();
        expect(rows.map((r) => [r.kind, r.signature, r.source])).toContainEqual(['service_absent', 'ghost', 'gateway']);
        const cycle = await smith.cycle();
        if (!cycle.ok) throw new Error(cycle.message);
        expect(cycle.service_absent.map((s) => s.signature)).toEqual(['ghost']);
        expect(cycle.wanted).toEqual([]);
        // Never authored: a proposal naming it is refused.
        expect(await smith.propose({ gap: 'service_absent:ghost' }, { persona: 'agent' })).toMatchObject({
          ok: false,
          kind: 'validation_failed',
          message: expect.stringMatching(/operator signal/),
        });
      } finally {
        await smith.close();
        await forge.close();
      }
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
