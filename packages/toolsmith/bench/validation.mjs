// Validation of a typical proposal (a 4-property schema, 5 examples, deterministic) against the
// built library (run `pnpm build` first): how long the gate takes and how many sandbox runs it
// took (target <= 2 s). Baseline in the same run: the same number of sandbox runs as plain calls
// of the same tool once it is live, one after another, the cache off (what the runs alone cost serially).
import { mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createForge } from '@forge/runner';
import { createToolsmith } from '../dist/index.js';

const ROUNDS = 5;

const blueprint = {
  capability: 'text.word_count',
  description: 'Counts the words of a text, optionally lower-casing and keeping the top words.',
  input_schema: {
    type: 'object',
    properties: {
      text: { type: 'string', maxLength: 10000 },
      lower: { type: 'boolean' },
      top: { type: 'integer', minimum: 0, maximum: 20 },
      sep: { type: 'string', enum: ['space', 'any'] },
    },
    required: ['text'],
    additionalProperties: false,
  },
  output_schema: { type: 'object', properties: { words: { type: 'integer' }, top: { type: 'array' } }, required: ['words'] },
  runtime: 'python3',
  impl: [
    'import json, re, sys',
    'a = json.load(sys.stdin)',
    't = a["text"].lower() if a.get("lower") else a["text"]',
    'ws = t.split() if a.get("sep", "space") == "space" else [w for w in re.split(r"\\W+", t) if w]',
    'counts = {}',
    'for w in ws: counts[w] = counts.get(w, 0) + 1',
    'top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: a.get("top", 0)]',
    'print(json.dumps({"ok": True, "data": {"words": len(ws), "top": [k for k, _ in top]}}))',
  ].join('\n'),
  examples: [
    { input: { text: 'a b c' }, expect: { words: 3, top: [] } },
    { input: { text: 'A a b', lower: true, top: 1 }, expect: { words: 3, top: ['a'] } },
    { input: { text: '' }, expect: { words: 0, top: [] } },
    { input: { text: 'x,y', sep: 'any' }, expect: { words: 2, top: [] } },
    { input: { text: 'one two two', top: 2 }, expect: { words: 3, top: ['two', 'one'] } },
  ],
  deterministic: true,
};

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
