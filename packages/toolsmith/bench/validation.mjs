// Validation of a typical proposal (a 4-property schema, 5 examples, deterministic) against the
// built library (run `pnpm build` first): how long the gate takes and how many sandbox runs it
// took (target <= 2 s). Baseline in the same run: the same number of sandbox runs as plain calls
// of the same tool once it is live, one after another, the cache off (what the runs alone cost serially).
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createForge } from '@forge/runner';
import { createToolsmith } from '../dist/index.js';

const ROUNDS = 5;

/** The typical proposal: a 4-property schema, 5 examples, deterministic (shared with the tests). */
const blueprint = JSON.parse(readFileSync(new URL('./word-count.json', import.meta.url), 'utf8'));

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const root = await mkdtemp(join(tmpdir(), 'forge-bench-toolsmith-'));
try {
  const home = join(root, 'home');
  const project = join(root, 'project');
  mkdirSync(join(project, '.forge'), { recursive: true, mode: 0o700 });
  mkdirSync(home, { recursive: true, mode: 0o700 });
  writeFileSync(
    join(project, '.forge', 'policy.json'),
    JSON.stringify({
      toolsmith: { enabled: true, capability_allow: ['text.*'], approvers: ['alice'] },
      breakers: { per_tool_rpm: 100000 },
    }),
  );
  let smith;
  const forge = await createForge({ home, project, env: {}, onUnknownTool: (n, c) => smith?.unknownTool(n, c) });
  smith = createToolsmith({ forge });
  try {
    const times = [];
    let last;
    for (let i = 0; i < ROUNDS; i++) {
      const t0 = performance.now();
      const r = await smith.propose(blueprint, { persona: 'agent', session: `bench-${i}` });
      times.push(performance.now() - t0);
      if (!r.ok || r.proposal.state !== 'validated') throw new Error(`proposal did not validate: ${JSON.stringify(r)}`);
      last = r.proposal;
    }
    const v = last.validation;
    const approved = await smith.approve(last.id, { by: 'alice' });
    if (!approved.ok) throw new Error(approved.message);
    // Baseline: the same number of sandbox runs as calls of the live tool, serially (cache off: every call runs).
    const plain = await createForge({ home, project, env: {}, cache: false });
    const inputs = v.checks.filter((c) => c.run_id !== undefined).map((c) => c.input);
    for (const c of v.checks) if (c.kind === 'determinism') inputs.push(c.input, c.input);
    if (inputs.length !== v.sandbox_runs) throw new Error(`the baseline has ${inputs.length} runs, the gate ${v.sandbox_runs}`);
    const base = [];
    for (let i = 0; i < ROUNDS; i++) {
      const t0 = performance.now();
      for (const input of inputs) {
        const env = await plain.callTool('text.word_count', input, { persona: 'agent', session: `base-${i}` });
        if (env.meta.cache !== 'off') throw new Error(`the baseline call was not a run: cache ${env.meta.cache}`);
      }
      base.push(performance.now() - t0);
    }
    await plain.close();
    const ours = median(times);
    const serial = median(base);
    const count = (k) => v.checks.filter((c) => c.kind === k).length;
    console.log(
      `validation: ${ours.toFixed(0)} ms median of ${ROUNDS} (propose + the whole gate; target <= 2000 ms), ${v.sandbox_runs} sandbox runs: ${count('example')} examples, ${count('probe_valid')} valid probes, ${count('probe_invalid')} invalid probes (refused, no run), ${count('determinism')} determinism check`,
    );
    console.log(
      `baseline:   ${serial.toFixed(0)} ms for the same ${inputs.length} runs as plain calls of the live tool, one after another`,
    );
    console.log(`ratio:      ${(ours / serial).toFixed(2)} of the baseline`);
  } finally {
    await smith.close();
    await forge.close();
  }
} finally {
  await rm(root, { recursive: true, force: true });
}
