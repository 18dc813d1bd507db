#!/usr/bin/env node
// Benchmarks of @forge/policy: the cost of one decision and of the reload check a call makes at
// its boundary, each next to a baseline measured in the same run. Not a test: figures depend on
// the host.
//
//   pnpm bench

import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Breakers, checkAllowRule, checkNamespace, checkPersonaAcl, checkToolName, createPolicy, parseToolAcl } from '../dist/index.js';

const dir = mkdtempSync(join(tmpdir(), 'forge-policy-bench-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
const user = join(dir, 'user-policy.json');
const workspace = join(dir, 'policy.json');
const rules = join(dir, 'policy.rules');
writeFileSync(user, JSON.stringify({ forbidden_tool_names: ['deploy_*', 'rm_*', 'sudo*'], breakers: { per_tool_rpm: 1_000_000 } }));
writeFileSync(
  workspace,
  JSON.stringify({
    forbidden_tool_names: ['prod.*'],
    persona_namespaces: { coder: 'code', browser: 'web', research: 'research' },
    persona_secret_allow: { coder: ['GITHUB_TOKEN'] },
  }),
);
writeFileSync(rules, Array.from({ length: 200 }, (_, i) => `allow coder_t tool:code.tool_${i} execute`).join('\n'));

const policy = createPolicy({ userFile: user, workspaceFile: workspace, rulesFile: rules });
const state = policy.current();
if (!state.ok) throw new Error(state.message);
const snap = state.snapshot;
const acl = parseToolAcl('code.*,forge_list');
const breakers = new Breakers();

/** Median ns per op over `rounds` rounds of `n` calls. */
function measure(fn, n = 100_000, rounds = 9) {
  for (let i = 0; i < n; i++) fn(i); // warm up
  const per = [];
  for (let r = 0; r < rounds; r++) {
    const t = process.hrtime.bigint();
    for (let i = 0; i < n; i++) fn(i);
    per.push(Number(process.hrtime.bigint() - t) / n);
  }
  return per.sort((a, b) => a - b)[Math.floor(rounds / 2)];
}

let sink = 0;
// One call's policy decisions: forbidden name, ACL, allow-rule, breakers.
const decision = measure((i) => {
  const name = `code.tool_${i % 200}`;
  sink += checkToolName(snap, name).ok ? 1 : 0;
  sink += checkPersonaAcl(acl, 'coder', name, ['forge_list']).ok ? 1 : 0;
  sink += checkAllowRule(snap, 'coder', 'tool', name, 'execute').ok ? 1 : 0;
  sink += breakers.checkCall(name, snap.policy.breakers).ok ? 1 : 0;
});
const namespace = measure((i) => {
  sink += checkNamespace(snap, 'coder', `code.tool_${i % 200}`).ok ? 1 : 0;
});
const names = new Set(Array.from({ length: 200 }, (_, i) => `code.tool_${i}`));
const baselineLookup = measure((i) => {
  sink += names.has(`code.tool_${i % 200}`) ? 1 : 0;
});
// Files changed less than a second ago are reread until they are older (see README): measure the
// steady state.
await new Promise((r) => setTimeout(r, 1100));
const reload = measure(() => {
  sink += policy.current().ok ? 1 : 0;
}, 20_000);
const baselineStat = measure(() => {
  for (const f of [user, workspace, rules]) sink += statSync(f, { bigint: true }).size > 0n ? 1 : 0;
}, 20_000);

const us = (ns) => `${(ns / 1000).toFixed(3)} µs`;
const mark = (ok) => (ok ? ' ' : '!');
console.log(`@forge/policy benchmark — node ${process.version}, ${availableParallelism()} cores (median of 9 rounds)`);
console.log('  (! marks a figure that misses its target on this machine)\n');
console.log(
  `${mark(decision <= 2000)} decision (name, ACL, allow-rule, breakers)  ${us(decision)}  (target ≤ 2 µs)   baseline Set.has ${us(baselineLookup)}, ratio ${(decision / baselineLookup).toFixed(1)}×`,
);
console.log(`${mark(namespace <= 2000)} namespace check                          ${us(namespace)}  (target ≤ 2 µs)`);
console.log(
  `${mark(reload <= 20_000)} reload check, 3 files unchanged           ${us(reload)}  (target ≤ 20 µs)  baseline 3× statSync ${us(baselineStat)}, ratio ${(reload / baselineStat).toFixed(2)}×`,
);
if (sink === 42) console.log('');
