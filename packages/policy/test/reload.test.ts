/**
 * Hot reload with real files in temp dirs: what `current()` returns and which events it emits as
 * the user's and the workspace's policy.json and the allow-rules change under it, including a
 * real writer process rewriting a file non-atomically while it is read.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { scaled } from '@forge/test-utils';
import { describe, expect, it, onTestFinished } from 'vitest';
import {
  Breakers,
  bindAllow,
  checkAllowRule,
  checkToolName,
  createPolicy,
  createSnapshot,
  mergePolicies,
  type Policy,
  type PolicyDocument,
  type PolicyEvent,
  type PolicySnapshot,
  parsePolicyDocument,
} from '../src/index.js';
import { tempDir } from './helpers.js';

const ALL_KEYS = [
  'forbidden_tool_names',
  'breakers',
  'persona_namespaces',
  'operator_personas',
  'persona_sandbox_overrides',
  'persona_secret_allow',
  'budgets',
  'bind_roots',
  'bind_allow',
  'runtimes',
  'toolsmith',
  'hooks',
  'secret_delivery',
];

interface Files {
  dir: string;
  userFile: string;
  workspaceFile: string;
  rulesFile: string;
}

/** A home and a project in a fresh temp dir; no file is written yet. */
async function layout(): Promise<Files> {
  const dir = await tempDir();
  const userFile = join(dir, 'home', '.forge', 'policy.json');
  const workspaceFile = join(dir, 'project', '.forge', 'policy.json');
  mkdirSync(dirname(userFile), { recursive: true });
  mkdirSync(dirname(workspaceFile), { recursive: true });
  return { dir, userFile, workspaceFile, rulesFile: join(dir, 'project', '.forge', 'policy.rules') };
}

function writeDoc(file: string, doc: PolicyDocument): void {
  writeFileSync(file, `${JSON.stringify(doc, null, 2)}\n`);
}

/**
 * createPolicy over `files`, recording its events. These tests judge every change at once
 * (`settleMs: 0`) to pin down what is reported; settle.test.ts covers the settle window.
 */
function open(files: Partial<Files>, settleMs = 0): { policy: Policy; events: PolicyEvent[] } {
  const events: PolicyEvent[] = [];
  const { userFile, workspaceFile, rulesFile } = files;
  const policy = createPolicy({ userFile, workspaceFile, rulesFile, settleMs, onEvent: (e) => events.push(e) });
  return { policy, events };
}

/** The snapshot in force (fails the test when no policy is). */
function snap(policy: Policy): PolicySnapshot {
  const s = policy.current();
  if (!s.ok) throw new Error(`expected a policy in force: ${s.message}`);
  return s.snapshot;
}

const rpm = (policy: Policy) => snap(policy).policy.breakers.per_tool_rpm;

describe('initial load', () => {
  it('merges the workspace over the user over the defaults, and says so once', async () => {
    const f = await layout();
    const user: PolicyDocument = { forbidden_tool_names: ['rm_*'], breakers: { per_tool_rpm: 30, cooldown_s: 20 }, bind_roots: ['/srv'] };
    const ws: PolicyDocument = { forbidden_tool_names: ['sh?ll'], breakers: { per_tool_rpm: 10 }, runtimes: { allow: ['deno'] } };
    writeDoc(f.userFile, user);
    writeDoc(f.workspaceFile, ws);
    const { policy, events } = open(f);
    const s = snap(policy);
    expect(s.policy).toEqual(mergePolicies(user, ws));
    expect(s.policy.breakers).toEqual({ per_tool_rpm: 10, per_session_forge_count: 50, failure_threshold: 5, cooldown_s: 20 });
    expect(s.policy.forbidden_tool_names).toEqual(['forge_*', 'rm_*', 'sh?ll']);
    expect(s.policy.runtimes.allow).toEqual(['deno']);
    expect(s.rules).toBe(null);
    expect(s.generation).toBe(1);
    expect(s.digest).toBe(createSnapshot(mergePolicies(user, ws), null).digest);
    expect(s.sources).toEqual([
      { file: f.userFile, kind: 'policy', status: 'loaded' },
      { file: f.workspaceFile, kind: 'policy', status: 'loaded' },
      { file: f.rulesFile, kind: 'rules', status: 'absent' },
    ]);
    expect(events).toEqual([
      { type: 'policy.reloaded', generation: 1, digest: s.digest, files: [f.userFile, f.workspaceFile], changed: ALL_KEYS, initial: true },
    ]);
  });

  it('with no files is the defaults', async () => {
    const f = await layout();
    const { policy, events } = open(f);
    expect(snap(policy).policy).toEqual(mergePolicies());
    expect(events).toEqual([
      { type: 'policy.reloaded', generation: 1, digest: snap(policy).digest, files: [], changed: ALL_KEYS, initial: true },
    ]);
    const bare = createPolicy();
    expect(bare.current()).toEqual({ ok: true, snapshot: expect.objectContaining({ policy: mergePolicies(), rules: null, sources: [] }) });
  });

  it('unions bind_allow across the user and the workspace files, and bindAllow expands ~ and the project token', async () => {
    const f = await layout();
    const home = join(f.dir, 'home');
    const project = join(f.dir, 'project');
    writeDoc(f.userFile, { bind_allow: ['~/.bashrc', `\${project}/.envrc`] });
    writeDoc(f.workspaceFile, { bind_allow: [`\${project}/.git`, '~/.bashrc', '/srv/data/.vscode'] });
    const { policy } = open(f);
    const s = snap(policy);
    expect(s.policy.bind_allow).toEqual(['~/.bashrc', `\${project}/.envrc`, `\${project}/.git`, '/srv/data/.vscode']);
    expect(bindAllow(s, { project, home })).toEqual([
      join(home, '.bashrc'),
      join(project, '.envrc'),
      join(project, '.git'),
      '/srv/data/.vscode',
    ]);
    // Without a project, the entries relative to it name nothing.
    expect(bindAllow(s, { home })).toEqual([join(home, '.bashrc'), '/srv/data/.vscode']);

    // An edit of either file changes the union at the next call; a bad entry keeps the last good policy.
    writeDoc(f.workspaceFile, {});
    expect(bindAllow(snap(policy), { project, home })).toEqual([join(home, '.bashrc'), join(project, '.envrc')]);
    writeDoc(f.userFile, { bind_allow: ['.git'] });
    expect(snap(policy).policy.bind_allow).toEqual(['~/.bashrc', `\${project}/.envrc`]);
  });

  it('accepts a file starting with a byte order mark', async () => {
    const f = await layout();
    writeFileSync(f.workspaceFile, '\uFEFF{"breakers": {"per_tool_rpm": 4}}\n');
    const { policy, events } = open(f);
    expect(rpm(policy)).toBe(4);
    expect(events.map((e) => e.type)).toEqual(['policy.reloaded']);
  });

  it('a file invalid from the start leaves no policy in force, then loads once fixed', async () => {
    const f = await layout();
    writeDoc(f.userFile, { breakers: { per_tool_rpm: 30 } });
    writeFileSync(f.workspaceFile, '{\n  "breakers": {\n    "per_tool_rpm": 0\n  }\n}\n');
    const { policy, events } = open(f);
    const state = policy.current();
    expect(state).toEqual({ ok: false, kind: 'policy_denied', message: expect.any(String) });
    expect(state.ok ? '' : state.message.replaceAll(f.dir, '<tmp>')).toMatchInlineSnapshot(
      `"no policy is in force, so nothing runs: <tmp>/project/.forge/policy.json:3:21: breakers.per_tool_rpm must be a positive integer (got 0). Fix the file; it is reread at the next call"`,
    );
    expect(events).toEqual([
      {
        type: 'policy.reload_failed',
        file: f.workspaceFile,
        line: 3,
        column: 21,
        pointer: '/breakers/per_tool_rpm',
        reason: 'breakers.per_tool_rpm must be a positive integer (got 0)',
        message: `${f.workspaceFile}:3:21: breakers.per_tool_rpm must be a positive integer (got 0)`,
        kept: 'nothing',
      },
    ]);
    for (let i = 0; i < 100; i++) expect(policy.current()).toEqual(state);
    expect(events).toHaveLength(1);

    writeDoc(f.workspaceFile, { breakers: { per_tool_rpm: 5 } });
    const s = snap(policy);
    expect(s.policy.breakers.per_tool_rpm).toBe(5);
    expect(s.sources.map((x) => x.status)).toEqual(['loaded', 'loaded', 'absent']);
    expect(events.slice(1)).toEqual([
      { type: 'policy.reloaded', generation: s.generation, digest: s.digest, files: [f.workspaceFile], changed: ALL_KEYS, initial: false },
    ]);
  });

  it('an invalid rules file from the start leaves no policy in force either', async () => {
    const f = await layout();
    writeFileSync(f.rulesFile, 'allow coder_t tool:fib execute\nallow coder_t tool:* execute\n');
    const { policy, events } = open(f);
    const state = policy.current();
    expect(state).toEqual({ ok: false, kind: 'policy_denied', message: expect.any(String) });
    expect(state.ok ? '' : state.message.replaceAll(f.dir, '<tmp>')).toMatchInlineSnapshot(
      `"no policy is in force, so nothing runs: <tmp>/project/.forge/policy.rules:2: "tool:*": globs are not allowed; write one rule per name. Fix the file; it is reread at the next call"`,
    );
    expect(events).toEqual([
      {
        type: 'policy.reload_failed',
        file: f.rulesFile,
        line: 2,
        reason: '"tool:*": globs are not allowed; write one rule per name',
        message: `${f.rulesFile}:2: "tool:*": globs are not allowed; write one rule per name`,
        kept: 'nothing',
      },
    ]);
  });
});

describe('edits apply on the next current()', () => {
  it('a forbidden-name edit blocks an existing tool; a snapshot taken before still allows it', async () => {
    const f = await layout();
    writeDoc(f.workspaceFile, {});
    const { policy, events } = open(f);
    const before = snap(policy);
    expect(checkToolName(before, 'deploy')).toEqual({ ok: true });

    writeDoc(f.workspaceFile, { forbidden_tool_names: ['deploy'] });
    const after = snap(policy);
    expect(checkToolName(after, 'deploy')).toEqual({
      ok: false,
      kind: 'name_forbidden',
      message: 'tool name "deploy" matches the forbidden pattern "deploy" (policy forbidden_tool_names); choose another name',
    });
    // The call that took `before` keeps deciding from it.
    expect(checkToolName(before, 'deploy')).toEqual({ ok: true });
    expect(before.policy.forbidden_tool_names).toEqual(['forge_*']);
    expect(after.generation).toBe(before.generation + 1);
    expect(after.digest).not.toBe(before.digest);
    expect(events.slice(1)).toEqual([
      {
        type: 'policy.reloaded',
        generation: after.generation,
        digest: after.digest,
        files: [f.workspaceFile],
        changed: ['forbidden_tool_names'],
        initial: false,
      },
    ]);
  });

  it('tightening per_tool_rpm applies to existing breakers at the next call, keeping their state', async () => {
    const f = await layout();
    writeDoc(f.workspaceFile, { breakers: { per_tool_rpm: 10 } });
    const { policy } = open(f);
    const t = 1_900_000_000_000;
    const breakers = new Breakers({ now: () => t });
    for (let i = 0; i < 9; i++) expect(breakers.checkCall('fib', snap(policy).policy.breakers)).toEqual({ ok: true, trial: false });

    writeDoc(f.workspaceFile, { breakers: { per_tool_rpm: 3 } });
    const s = snap(policy).policy.breakers;
    expect(s.per_tool_rpm).toBe(3);
    // One token was left of the ten: not a fresh bucket of three.
    expect(breakers.state('fib', s).tokens).toBe(1);
    expect(breakers.checkCall('fib', s)).toEqual({ ok: true, trial: false });
    expect(breakers.checkCall('fib', snap(policy).policy.breakers)).toEqual({
      ok: false,
      kind: 'breaker_open',
      message: 'tool "fib" was called more than 3 times in a minute (breakers.per_tool_rpm); retry in 20 s',
      retryAfterMs: 20_000,
    });
  });

  it('a user-file edit applies under the workspace file', async () => {
    const f = await layout();
    writeDoc(f.userFile, { breakers: { per_tool_rpm: 30, cooldown_s: 20 } });
    writeDoc(f.workspaceFile, { breakers: { per_tool_rpm: 10 } });
    const { policy, events } = open(f);
    writeDoc(f.userFile, { breakers: { per_tool_rpm: 1, cooldown_s: 2 } });
    expect(snap(policy).policy.breakers).toMatchObject({ per_tool_rpm: 10, cooldown_s: 2 });
    expect(events.at(-1)).toMatchObject({ type: 'policy.reloaded', files: [f.userFile], changed: ['breakers'] });
  });

  it('an unchanged file is not reread: the same state, no event, however many calls', async () => {
    const f = await layout();
    writeDoc(f.userFile, { breakers: { per_tool_rpm: 30 } });
    writeDoc(f.workspaceFile, { forbidden_tool_names: ['x'] });
    writeFileSync(f.rulesFile, 'allow coder_t tool:fib execute\n');
    const { policy, events } = open(f);
    const first = policy.current();
    for (let i = 0; i < 2000; i++) {
      if (policy.current() !== first) throw new Error(`call ${i} returned a new state`);
    }
    expect(events).toHaveLength(1);
    expect(snap(policy).generation).toBe(1);
  });

  it('sees a same-size rewrite within the same second (the stamp has the ctime in ns)', async () => {
    const f = await layout();
    const second = 1_700_000_000;
    const write = (name: string) => {
      writeFileSync(f.workspaceFile, JSON.stringify({ forbidden_tool_names: [name] }));
      // Same mtime (to the second) and same size every time: only the ctime tells the edits apart.
      utimesSync(f.workspaceFile, second, second);
    };
    write('aaaa');
    const { policy } = open(f);
    const size = statSync(f.workspaceFile).size;
    expect(snap(policy).policy.forbidden_tool_names).toEqual(['forge_*', 'aaaa']);
    for (let i = 0; i < 50; i++) {
      const name = `n${String(i).padStart(3, '0')}`;
      write(name);
      expect(statSync(f.workspaceFile).size).toBe(size);
      expect(snap(policy).policy.forbidden_tool_names).toEqual(['forge_*', name]);
    }
  });

  it('sees a same-size file renamed over the old one (a new inode)', async () => {
    const f = await layout();
    writeFileSync(f.workspaceFile, '{"forbidden_tool_names": ["aaaa"]}');
    const { policy } = open(f);
    expect(snap(policy).policy.forbidden_tool_names).toEqual(['forge_*', 'aaaa']);
    const old = statSync(f.workspaceFile);
    const tmp = `${f.workspaceFile}.tmp`;
    writeFileSync(tmp, '{"forbidden_tool_names": ["bbbb"]}');
    utimesSync(tmp, old.atime, old.mtime);
    renameSync(tmp, f.workspaceFile);
    expect(statSync(f.workspaceFile).ino).not.toBe(old.ino);
    expect(snap(policy).policy.forbidden_tool_names).toEqual(['forge_*', 'bbbb']);
  });
});

describe('a bad edit keeps the last good policy', () => {
  it('malformed JSON: one reload_failed with file, line, column and reason; the fix reloads, listing what changed', async () => {
    const f = await layout();
    writeDoc(f.workspaceFile, { breakers: { per_tool_rpm: 10 } });
    const { policy, events } = open(f);
    const good = snap(policy);

    writeFileSync(f.workspaceFile, '{\n  "breakers": {\n    "per_tool_rpm": 3,\n  }\n}\n');
    for (let i = 0; i < 200; i++) {
      const s = snap(policy);
      if (s.digest !== good.digest) throw new Error(`call ${i}: the policy in force changed`);
    }
    expect(rpm(policy)).toBe(10);
    expect(snap(policy).sources[1]).toEqual({ file: f.workspaceFile, kind: 'policy', status: 'kept' });
    expect(events.slice(1)).toEqual([
      {
        type: 'policy.reload_failed',
        file: f.workspaceFile,
        line: 4,
        column: 3,
        reason: 'not valid JSON: trailing comma before "}"',
        message: `${f.workspaceFile}:4:3: not valid JSON: trailing comma before "}"`,
        kept: 'last_good',
      },
    ]);

    writeDoc(f.workspaceFile, { breakers: { per_tool_rpm: 3 }, runtimes: { allow: ['node'] } });
    const fixed = snap(policy);
    expect(fixed.policy.breakers.per_tool_rpm).toBe(3);
    expect(fixed.sources[1]?.status).toBe('loaded');
    expect(events.slice(2)).toEqual([
      {
        type: 'policy.reloaded',
        generation: fixed.generation,
        digest: fixed.digest,
        files: [f.workspaceFile],
        changed: ['breakers', 'runtimes'],
        initial: false,
      },
    ]);
    expect(fixed.generation).toBeGreaterThan(good.generation);
  });

  it('a schema error: the event has the pointer; a different error is reported again, the same one is not', async () => {
    const f = await layout();
    writeDoc(f.workspaceFile, { breakers: { per_tool_rpm: 10 } });
    const { policy, events } = open(f);
    writeFileSync(f.workspaceFile, '{"breakers": {"per_tool_rpm": "3"}}');
    expect(rpm(policy)).toBe(10);
    writeFileSync(f.workspaceFile, '{"breakers":  {"per_tool_rpm": "3"}}');
    expect(rpm(policy)).toBe(10);
    writeFileSync(f.workspaceFile, '{"breakers": {"per_tool_rpm": -3}}');
    expect(rpm(policy)).toBe(10);
    expect(events.slice(1)).toEqual([
      {
        type: 'policy.reload_failed',
        file: f.workspaceFile,
        line: 1,
        column: 31,
        pointer: '/breakers/per_tool_rpm',
        reason: 'breakers.per_tool_rpm must be an integer (got "3")',
        message: `${f.workspaceFile}:1:31: breakers.per_tool_rpm must be an integer (got "3")`,
        kept: 'last_good',
      },
      // The second edit moved the value a column: a new message, so a new event.
      expect.objectContaining({ type: 'policy.reload_failed', column: 32, kept: 'last_good' }),
      expect.objectContaining({ type: 'policy.reload_failed', reason: 'breakers.per_tool_rpm must be a positive integer (got -3)' }),
    ]);
  });

  it('breaking the file again after a fix is reported again', async () => {
    const f = await layout();
    writeDoc(f.workspaceFile, {});
    const { policy, events } = open(f);
    for (const [text, n] of [
      ['{', 1],
      ['{}', 2],
      ['{', 3],
    ] as const) {
      writeFileSync(f.workspaceFile, text);
      snap(policy);
      expect(events.slice(1).map((e) => e.type)).toHaveLength(n);
    }
    expect(events.slice(1).map((e) => e.type)).toEqual(['policy.reload_failed', 'policy.reloaded', 'policy.reload_failed']);
  });

  it('an emptied file is a failure, not an empty policy', async () => {
    const f = await layout();
    writeDoc(f.workspaceFile, { forbidden_tool_names: ['x'] });
    const { policy, events } = open(f);
    writeFileSync(f.workspaceFile, '');
    expect(snap(policy).policy.forbidden_tool_names).toEqual(['forge_*', 'x']);
    expect(events.at(-1)).toEqual({
      type: 'policy.reload_failed',
      file: f.workspaceFile,
      line: 1,
      column: 1,
      reason: 'the file is empty; write {} for an empty policy',
      message: `${f.workspaceFile}:1:1: the file is empty; write {} for an empty policy`,
      kept: 'last_good',
    });
  });

  it('a directory in place of the file is a failure that keeps the last good policy', async () => {
    const f = await layout();
    writeDoc(f.workspaceFile, { breakers: { per_tool_rpm: 10 } });
    const { policy, events } = open(f);
    rmSync(f.workspaceFile);
    mkdirSync(f.workspaceFile);
    for (let i = 0; i < 50; i++) expect(rpm(policy)).toBe(10);
    expect(events.slice(1)).toEqual([
      {
        type: 'policy.reload_failed',
        file: f.workspaceFile,
        reason: 'is not a regular file; remove it or put a policy file there',
        message: `${f.workspaceFile}: is not a regular file; remove it or put a policy file there`,
        kept: 'last_good',
      },
    ]);
    rmSync(f.workspaceFile, { recursive: true });
    writeDoc(f.workspaceFile, { breakers: { per_tool_rpm: 2 } });
    expect(rpm(policy)).toBe(2);
  });

  it('a directory in place of the file from the start leaves no policy in force', async () => {
    const f = await layout();
    mkdirSync(f.userFile);
    const { policy, events } = open(f);
    expect(policy.current()).toEqual({
      ok: false,
      kind: 'policy_denied',
      message: `no policy is in force, so nothing runs: ${f.userFile}: is not a regular file; remove it or put a policy file there. Fix the file; it is reread at the next call`,
    });
    expect(events).toEqual([expect.objectContaining({ type: 'policy.reload_failed', file: f.userFile, kept: 'nothing' })]);
  });
});

describe('files that come and go', () => {
  it('deleting a file falls back to the less specific ones', async () => {
    const f = await layout();
    writeDoc(f.userFile, { breakers: { per_tool_rpm: 30 } });
    writeDoc(f.workspaceFile, { breakers: { per_tool_rpm: 10 } });
    const { policy, events } = open(f);
    expect(rpm(policy)).toBe(10);

    rmSync(f.workspaceFile);
    const s = snap(policy);
    expect(s.policy.breakers.per_tool_rpm).toBe(30);
    expect(s.sources.map((x) => x.status)).toEqual(['loaded', 'absent', 'absent']);
    expect(events.at(-1)).toEqual({
      type: 'policy.reloaded',
      generation: s.generation,
      digest: s.digest,
      files: [],
      changed: ['breakers'],
      initial: false,
    });

    rmSync(f.userFile);
    expect(snap(policy).policy).toEqual(mergePolicies());
    writeDoc(f.workspaceFile, { breakers: { per_tool_rpm: 7 } });
    expect(rpm(policy)).toBe(7);
    expect(events.map((e) => e.type)).toEqual(['policy.reloaded', 'policy.reloaded', 'policy.reloaded', 'policy.reloaded']);
  });

  it('deleting a file whose edit was bad drops its last good version too', async () => {
    const f = await layout();
    writeDoc(f.workspaceFile, { breakers: { per_tool_rpm: 10 } });
    const { policy } = open(f);
    writeFileSync(f.workspaceFile, '{"breakers": ');
    expect(rpm(policy)).toBe(10);
    rmSync(f.workspaceFile);
    expect(rpm(policy)).toBe(60);
    expect(snap(policy).sources[1]?.status).toBe('absent');
  });

  it('adding a rules file starts requiring rules; a bad rules edit keeps the last good rules; deleting it lifts them', async () => {
    const f = await layout();
    const { policy, events } = open(f);
    expect(checkAllowRule(snap(policy), 'coder', 'tool', 'sq', 'execute')).toEqual({ ok: true });

    writeFileSync(f.rulesFile, '# coder may run fib\nallow coder_t tool:fib execute\n');
    const ruled = snap(policy);
    expect(ruled.rules?.size).toBe(1);
    expect(checkAllowRule(ruled, 'coder', 'tool', 'fib', 'execute')).toEqual({ ok: true });
    expect(checkAllowRule(ruled, 'coder', 'tool', 'sq', 'execute')).toEqual({
      ok: false,
      kind: 'policy_denied',
      message: `${f.rulesFile} has no rule "allow coder_t tool:sq execute", and allow-rules deny what they do not allow; add that line to permit it`,
    });
    expect(events.at(-1)).toMatchObject({ type: 'policy.reloaded', files: [f.rulesFile], changed: ['rules'] });

    writeFileSync(f.rulesFile, '# coder may run fib and sq\nallow coder_t tool:fib execute\nallow coder_t tool:sq exec\n');
    for (let i = 0; i < 20; i++) expect(checkAllowRule(snap(policy), 'coder', 'tool', 'sq', 'execute').ok).toBe(false);
    expect(checkAllowRule(snap(policy), 'coder', 'tool', 'fib', 'execute')).toEqual({ ok: true });
    expect(snap(policy).sources[2]).toEqual({ file: f.rulesFile, kind: 'rules', status: 'kept' });
    expect(events.slice(2)).toEqual([
      {
        type: 'policy.reload_failed',
        file: f.rulesFile,
        line: 3,
        reason: 'unknown permission "exec" for class tool (expected: execute)',
        message: `${f.rulesFile}:3: unknown permission "exec" for class tool (expected: execute)`,
        kept: 'last_good',
      },
    ]);

    writeFileSync(f.rulesFile, '# coder may run fib and sq\nallow coder_t tool:fib execute\nallow coder_t tool:sq execute\n');
    expect(checkAllowRule(snap(policy), 'coder', 'tool', 'sq', 'execute')).toEqual({ ok: true });
    expect(events.at(-1)).toMatchObject({ type: 'policy.reloaded', changed: ['rules'] });

    rmSync(f.rulesFile);
    expect(snap(policy).rules).toBe(null);
    expect(checkAllowRule(snap(policy), 'reviewer', 'tool', 'anything', 'execute')).toEqual({ ok: true });
    expect(events.at(-1)).toMatchObject({ type: 'policy.reloaded', files: [], changed: ['rules'] });
  });
});

/**
 * The writer process: rewrites `file` in a loop, alternating two documents, each time
 * non-atomically (open with truncation, then two writes), until killed or after 30 s. It rests
 * a millisecond after each whole document: the truncation is slow on some file systems, and
 * without the rest a reader would find the file torn nearly every time and a whole document
 * only rarely.
 */
const WRITER = `
const fs = require('node:fs');
const [file, a, b] = process.argv.slice(1);
const docs = [a, b];
const rest = new Int32Array(new SharedArrayBuffer(4));
const end = Date.now() + 30000;
let n = 0;
process.stdout.write('ready\\n');
while (Date.now() < end) {
  const doc = docs[n++ % 2];
  const fd = fs.openSync(file, 'w');
  const half = doc.length >> 1;
  fs.writeSync(fd, doc.slice(0, half));
  fs.writeSync(fd, doc.slice(half));
  fs.closeSync(fd);
  Atomics.wait(rest, 0, 0, 1);
}
`;

describe('a writer process rewriting the file while it is read', () => {
  it('current() only ever returns one of the two documents, and a partial read only keeps the last good one', async () => {
    const f = await layout();
    const user: PolicyDocument = { bind_roots: ['/srv'] };
    const docA = `${JSON.stringify({ forbidden_tool_names: ['alpha_*'], breakers: { per_tool_rpm: 7 } }, null, 2)}\n`;
    const docB = `${JSON.stringify(
      { persona_namespaces: { coder: 'code' }, runtimes: { allow: ['deno'] }, breakers: { per_tool_rpm: 3, cooldown_s: 9 } },
      null,
      2,
    )}\n`;
    // The premise: no torn version of either document (a prefix, or one spliced onto the other)
    // is a valid document, so a torn read cannot pass for a whole one.
    for (let k = 0; k < Math.max(docA.length, docB.length); k++) {
      for (const torn of [docA.slice(0, k), docB.slice(0, k), docA.slice(0, k) + docB.slice(k), docB.slice(0, k) + docA.slice(k)]) {
        // (Only the final line feed may be missing.)
        if (torn.trimEnd() !== docA.trimEnd() && torn.trimEnd() !== docB.trimEnd()) {
          expect(parsePolicyDocument(torn, 'x').ok, JSON.stringify(torn)).toBe(false);
        }
      }
    }
    const effA = mergePolicies(user, JSON.parse(docA) as PolicyDocument);
    const effB = mergePolicies(user, JSON.parse(docB) as PolicyDocument);
    const digestA = createSnapshot(effA, null).digest;
    const digestB = createSnapshot(effB, null).digest;

    writeDoc(f.userFile, user);
    writeFileSync(f.workspaceFile, docA);
    const { policy, events } = open(f);
    expect(snap(policy).digest).toBe(digestA);

    const child = spawn(process.execPath, ['-e', WRITER, f.workspaceFile, docA, docB], { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.on('exit', (code, signal) => resolve({ code, signal })),
    );
    onTestFinished(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (s: string) => {
      stderr += s;
    });
    await new Promise<void>((resolve, reject) => {
      child.stdout.once('data', () => resolve());
      child.once('exit', (code) => reject(new Error(`the writer exited (${code}) before starting: ${stderr}`)));
    });

    const seen = { a: 0, b: 0 };
    const wrong: string[] = [];
    let switches = 0;
    let last = digestA;
    let calls = 0;
    // Until both documents were in force many times and at least one read was torn (usually well
    // under a second; the writer's pace depends on the file system and the load, so the limit
    // only bounds a starved writer and scales with the machine).
    const torn = () => events.some((e) => e.type === 'policy.reload_failed');
    const deadline = performance.now() + scaled(30_000);
    const seenA: PolicySnapshot[] = [];
    const seenB: PolicySnapshot[] = [];
    while (calls < 3_000 || ((switches < 50 || !torn()) && performance.now() < deadline)) {
      calls++;
      const state = policy.current();
      if (!state.ok) {
        wrong.push(`call ${calls}: no policy: ${state.message}`);
        continue;
      }
      const d = state.snapshot.digest;
      if (d === digestA) {
        seen.a++;
        if (seenA.length === 0) seenA.push(state.snapshot);
      } else if (d === digestB) {
        seen.b++;
        if (seenB.length === 0) seenB.push(state.snapshot);
      } else wrong.push(`call ${calls}: a policy that is neither document: ${JSON.stringify(state.snapshot.policy)}`);
      if (d !== last) switches++;
      last = d;
    }
    child.kill('SIGKILL');
    expect(await exited).toEqual({ code: null, signal: 'SIGKILL' });
    expect(stderr).toBe('');

    expect(wrong.slice(0, 5)).toEqual([]);
    // The writer and the reader did interleave: both documents were in force, many times over.
    expect(switches).toBeGreaterThanOrEqual(10);
    expect(seen.a).toBeGreaterThanOrEqual(5);
    expect(seen.b).toBeGreaterThanOrEqual(5);
    expect(seenA[0]?.policy).toEqual(effA);
    expect(seenB[0]?.policy).toEqual(effB);

    // Every failure was a torn read of the workspace file that kept the last good version.
    const failures = events.filter((e) => e.type === 'policy.reload_failed');
    expect(failures.length).toBeGreaterThanOrEqual(1);
    expect(failures.filter((e) => e.file !== f.workspaceFile || e.kept !== 'last_good')).toEqual([]);
    expect(events.filter((e) => e.type !== 'policy.reload_failed' && e.type !== 'policy.reloaded')).toEqual([]);
    expect(events.filter((e) => e.type === 'policy.reloaded' && e.initial)).toHaveLength(1);

    // Once the writer is gone, a whole document written in one go is what is in force.
    writeFileSync(f.workspaceFile, docB);
    expect(snap(policy).digest).toBe(digestB);
    expect(snap(policy).sources.map((s) => s.status)).toEqual(['loaded', 'loaded', 'absent']);
  });
});
