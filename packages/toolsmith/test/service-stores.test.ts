/**
 * createToolsmith over stores given to it (the GapStore and ProposalStore interfaces): it uses
 * them and nothing under its own directory, leaves them open on close, and works over a gap store
 * that answers later (as a database does) as over one that answers at once.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createForge } from '@forge/runner';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createToolsmith, type GapStore, openGapStore, openProposalStore } from '../src/index.js';
import { GOVERNED, requireSandbox } from './helpers.js';

async function world() {
  await requireSandbox();
  const root = await mkdtemp(join(tmpdir(), 'forge-toolsmith-stores-'));
  onTestFinished(() => rm(root, { recursive: true, force: true }));
  const home = join(root, 'home');
  const project = join(root, 'project');
  mkdirSync(home, { recursive: true, mode: 0o700 });
  mkdirSync(join(project, '.forge'), { recursive: true, mode: 0o700 });
  writeFileSync(join(project, '.forge', 'policy.json'), JSON.stringify(GOVERNED));
  const elsewhere = join(root, 'elsewhere');
  return { home, project, elsewhere };
}

/** The file gap store seen through the interface only, its reads answered later (as a database's are). */
function later(store: GapStore): GapStore {
  return {
    record: (r) => store.record(r),
    note: (r) => store.note(r),
    summary: async (q) => store.summary(q),
    history: async (k, s) => store.history(k, s),
    flush: () => store.flush(),
    close: () => store.close(),
  };
}

describe('createToolsmith with stores given', () => {
  it('records and proposes into the given stores, not its directory; close leaves them open', async () => {
    const w = await world();
    const gapStore = openGapStore({ dir: w.elsewhere });
    const proposalStore = openProposalStore({ dir: w.elsewhere });
    let smith: ReturnType<typeof createToolsmith> | undefined;
    const forge = await createForge({ home: w.home, project: w.project, env: {}, onUnknownTool: (n, c) => smith?.unknownTool(n, c) });
    onTestFinished(() => forge.close({ graceMs: 2000 }));
    smith = createToolsmith({ forge, gapStore, proposalStore, onWarning: () => {} });
    expect(smith.gaps).toBe(gapStore);
    expect(smith.proposals).toBe(proposalStore);
    const first = await forge.callTool('text.word_count', { text: 'x' }, { persona: 'agent' });
    expect(first.ok ? '' : first.error.message).toMatch(/noted the request \(1 of 2/);
    await gapStore.flush();
    expect(gapStore.records().map((r) => r.signature)).toEqual(['text.word_count']);
    const made = await proposalStore.create({
      state: 'pending',
      name: 'text.x',
      capability: 'text.x',
      persona: 'agent',
      session: 's',
      spec: { name: 'text.x', description: 'x', input_schema: { type: 'object' }, impl: 'print(1)', runtime: 'python3' },
      by: 'agent',
    });
    expect((await smith.list()).map((p) => p.id)).toEqual([made.id]);
    expect(existsSync(forge.paths.toolsmithDir)).toBe(false);
    await smith.close();
    await gapStore.record({ kind: 'missing_tool', signature: 'after.close', source: 'forge_request', persona: 'a', session: 's' });
    expect(gapStore.records()).toHaveLength(2);
    await gapStore.close();
  });

  it('over a gap store that answers later: the unknown-tool hint comes at once without a count; request, gapSummary and cycle await it', async () => {
    const w = await world();
    const file = openGapStore({ dir: w.elsewhere });
    let smith: ReturnType<typeof createToolsmith<GapStore>> | undefined;
    const forge = await createForge({ home: w.home, project: w.project, env: {}, onUnknownTool: (n, c) => smith?.unknownTool(n, c) });
    onTestFinished(() => forge.close({ graceMs: 2000 }));
    smith = createToolsmith({ forge, gapStore: later(file), onWarning: () => {} });
    const first = await forge.callTool('text.word_count', { text: 'x' }, { persona: 'agent' });
    expect(first.ok ? '' : first.error.message).toMatch(/noted the request \(a tool is wanted once it is asked for 2 times in 24 h\)/);
    const asked = await smith.request({ capability: 'text.word_count', description: 'count words' }, { persona: 'agent' });
    expect(asked).toMatchObject({ ok: true, gap: { count: 2, qualifies: true } });
    const summary = smith.gapSummary();
    expect(summary).toBeInstanceOf(Promise);
    expect(await summary).toEqual([expect.objectContaining({ signature: 'text.word_count', count: 2, qualifies: true })]);
    const cycle = await smith.cycle();
    expect(cycle).toMatchObject({ ok: true, wanted: [expect.objectContaining({ signature: 'text.word_count' })] });
    await smith.close();
    await file.close();
  });
});
