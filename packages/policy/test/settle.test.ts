/**
 * The settle window with real files and real time: editors and shells that write a policy file
 * in place (truncate, then write) must not make forge record `policy.reload_failed` for a valid
 * edit, and a genuinely bad edit is recorded once, after the file has settled.
 */
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, renameSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { scaled, waitFor } from '@forge/test-utils';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createPolicy, POLICY_SETTLE_MS, type Policy, type PolicyEvent, type PolicySnapshot } from '../src/index.js';
import { tempDir } from './helpers.js';

interface Files {
  workspaceFile: string;
  rulesFile: string;
}

async function layout(): Promise<Files> {
  const dir = join(await tempDir(), '.forge');
  mkdirSync(dir);
  return { workspaceFile: join(dir, 'policy.json'), rulesFile: join(dir, 'policy.rules') };
}

/** createPolicy with the default settle window, recording its events. */
function open(f: Files): { policy: Policy; events: PolicyEvent[] } {
  const events: PolicyEvent[] = [];
  const policy = createPolicy({ workspaceFile: f.workspaceFile, rulesFile: f.rulesFile, onEvent: (e) => events.push(e) });
  return { policy, events };
}

function snap(policy: Policy): PolicySnapshot {
  const s = policy.current();
  if (!s.ok) throw new Error(`expected a policy in force: ${s.message}`);
  return s.snapshot;
}

const failures = (events: PolicyEvent[]) => events.filter((e) => e.type === 'policy.reload_failed');

/**
 * Writes `text` to `file` the way an editor saving in place does: truncate, then write in two
 * parts. `between` runs after the truncation and after the first part (the calls that arrive
 * while the file is empty, then cut short).
 */
function writeInPlace(file: string, text: string, between: () => void): void {
  const fd = openSync(file, 'w');
  try {
    between();
    const half = text.length >> 1;
    writeSync(fd, text.slice(0, half));
    between();
    writeSync(fd, text.slice(half));
  } finally {
    closeSync(fd);
  }
}

/** Calls current() every few ms until `done()` (within the settle window plus a margin, scaled); returns the number of calls. */
async function callUntil(policy: Policy, what: string, done: () => boolean, boundMs = POLICY_SETTLE_MS + 2000): Promise<number> {
  let calls = 0;
  await waitFor(
    () => `${what} (${calls} calls of current() made)`,
    () => {
      if (done()) return true;
      policy.current();
      calls++;
      return false;
    },
    { timeoutMs: boundMs, intervalMs: 5 },
  );
  return calls;
}

describe('an in-place edit', () => {
  it('of policy.json with calls between the truncation and the write: no reload_failed, the new policy applies once written', async () => {
    const f = await layout();
    writeInPlace(f.workspaceFile, '{"breakers": {"per_tool_rpm": 10}}\n', () => {});
    const { policy, events } = open(f);
    expect(snap(policy).policy.breakers.per_tool_rpm).toBe(10);
    for (let n = 1; n <= 20; n++) {
      const rpm = 10 + n;
      writeInPlace(f.workspaceFile, `{\n  "breakers": {"per_tool_rpm": ${rpm}},\n  "forbidden_tool_names": ["x${n}_*"]\n}\n`, () => {
        // The last good policy serves these calls.
        for (let i = 0; i < 5; i++) expect(snap(policy).policy.breakers.per_tool_rpm).toBe(rpm - 1);
      });
      expect(snap(policy).policy.breakers.per_tool_rpm).toBe(rpm);
      expect(snap(policy).policy.forbidden_tool_names).toEqual(['forge_*', `x${n}_*`]);
    }
    // Nothing is recorded later either, once every version has settled.
    // Lets time pass: the settle window runs on the file's ctime, which no test can set back, and
    // a policy that rightly records nothing gives no event to wait for.
    await sleep(POLICY_SETTLE_MS + 100);
    for (let i = 0; i < 10; i++) expect(snap(policy).policy.breakers.per_tool_rpm).toBe(30);
    expect(failures(events)).toEqual([]);
    expect(events.filter((e) => e.type === 'policy.reloaded')).toHaveLength(21);
  });

  it('of policy.rules: a call between the truncation and the write is decided by the last good rules, not by an empty or cut-short file', async () => {
    const f = await layout();
    writeInPlace(f.rulesFile, 'allow coder_t tool:fib execute\n', () => {});
    const { policy, events } = open(f);
    const keys = () => [...(snap(policy).rules?.keys ?? [])].sort();
    const first = keys();
    expect(first).toHaveLength(1);
    writeInPlace(f.rulesFile, 'allow coder_t tool:fib execute\nallow coder_t tool:sq execute\n', () => {
      // Empty, then cut at "…tool:fib ex" or so: neither is adopted while the file settles.
      for (let i = 0; i < 5; i++) expect(keys()).toEqual(first);
    });
    expect(keys()).toHaveLength(2);
    // Lets time pass: past the settle window, which runs on the file's ctime (no test can set it
    // back); nothing is to be recorded then either, and nothing recorded gives no event.
    await sleep(POLICY_SETTLE_MS + 100);
    expect(keys()).toHaveLength(2);
    expect(failures(events)).toEqual([]);
  });

  it('by a real process rewriting the file in place in a loop: only whole documents are in force, and nothing is recorded', async () => {
    const f = await layout();
    const docA = `${JSON.stringify({ forbidden_tool_names: ['alpha_*'], breakers: { per_tool_rpm: 7 } }, null, 2)}\n`;
    const docB = `${JSON.stringify({ runtimes: { allow: ['deno'] }, breakers: { per_tool_rpm: 3, cooldown_s: 9 } }, null, 2)}\n`;
    writeInPlace(f.workspaceFile, docA, () => {});
    const { policy, events } = open(f);
    // Truncate, write half, rest, write the rest, rest: every read may land mid-edit.
    const writer = `
const fs = require('node:fs');
const [file, a, b] = process.argv.slice(1);
const rest = new Int32Array(new SharedArrayBuffer(4));
const end = Date.now() + 30000;
process.stdout.write('ready\\n');
for (let n = 0; Date.now() < end; n++) {
  const doc = n % 2 ? b : a;
  const fd = fs.openSync(file, 'w');
  Atomics.wait(rest, 0, 0, 1);
  fs.writeSync(fd, doc.slice(0, doc.length >> 1));
  Atomics.wait(rest, 0, 0, 1);
  fs.writeSync(fd, doc.slice(doc.length >> 1));
  fs.closeSync(fd);
  Atomics.wait(rest, 0, 0, 2);
}`;
    const child = spawn(process.execPath, ['-e', writer, f.workspaceFile, docA, docB], { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise<unknown>((resolve) => child.on('exit', resolve));
    onTestFinished(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    });
    await new Promise<void>((resolve, reject) => {
      child.stdout.once('data', () => resolve());
      child.once('exit', (code) => reject(new Error(`the writer exited (${code}) before starting`)));
    });
    const seen = new Map<number, number>();
    const end = performance.now() + 2 * POLICY_SETTLE_MS + 500;
    while (performance.now() < end) {
      const rpm = snap(policy).policy.breakers.per_tool_rpm;
      seen.set(rpm, (seen.get(rpm) ?? 0) + 1);
      // Lets time pass: a turn of the event loop between samples, over a fixed span of the writer's
      // rewriting (what is sampled is the point, not an event).
      await sleep(0);
    }
    child.kill('SIGKILL');
    await exited;
    expect([...seen.keys()].sort()).toEqual([3, 7]);
    expect(seen.get(3)).toBeGreaterThanOrEqual(5);
    expect(failures(events)).toEqual([]);
  });
});

describe('a genuinely malformed edit', () => {
  it('10 malformed in-place edits: exactly 10 reload_failed entries, each with its own reason, the last good policy in force throughout', {
    timeout: scaled(60_000),
  }, async () => {
    const f = await layout();
    writeInPlace(f.workspaceFile, '{"breakers": {"per_tool_rpm": 10}}\n', () => {});
    const { policy, events } = open(f);
    const bad = [
      '{"breakers": {"per_tool_rpm": 0}}',
      '{"breakers": {"per_tool_rpm": -4}}',
      '{"breakers": {"per_tool_rpm": "3"}}',
      '{"breakers": {"per_tool_rpm": 3},}',
      '{"breakers": {"per_tool_rpm": 3}',
      '{"brakers": {}}',
      '{"forbidden_tool_names": "x"}',
      '{"runtimes": {"allow": [1]}}',
      '[]',
      '{"breakers": {"cooldown_s": 1.5}}',
    ];
    for (const [i, text] of bad.entries()) {
      writeInPlace(f.workspaceFile, `${text}\n`, () => {
        for (let k = 0; k < 3; k++) policy.current();
      });
      await callUntil(policy, `reload_failed number ${i + 1}`, () => failures(events).length === i + 1);
      expect(snap(policy).policy.breakers.per_tool_rpm).toBe(10);
    }
    // Settled and reported: more calls record nothing more.
    for (let k = 0; k < 100; k++) policy.current();
    const got = failures(events);
    expect(got).toHaveLength(10);
    expect(new Set(got.map((e) => (e.type === 'policy.reload_failed' ? e.reason : ''))).size).toBe(10);
    expect(got.every((e) => e.type === 'policy.reload_failed' && e.kept === 'last_good' && e.file === f.workspaceFile)).toBe(true);
  });

  it('left in place is one entry, not one per call', async () => {
    const f = await layout();
    writeInPlace(f.workspaceFile, '{}\n', () => {});
    writeInPlace(f.rulesFile, 'allow coder_t tool:fib execute\n', () => {});
    const { policy, events } = open(f);
    writeInPlace(f.workspaceFile, '{"breakers": {"per_tool_rpm": 0}}\n', () => policy.current());
    writeInPlace(f.rulesFile, 'allow coder_t tool:* execute\n', () => policy.current());
    const end = performance.now() + 2 * POLICY_SETTLE_MS + 200;
    let calls = 0;
    while (performance.now() < end) {
      policy.current();
      calls++;
      // Lets time pass: calls spread over twice the settle window, so that a bad file is judged
      // many times after it settled; that it is recorded only once is the point, not an event.
      await sleep(2);
    }
    expect(calls).toBeGreaterThan(100);
    expect(failures(events).map((e) => (e.type === 'policy.reload_failed' ? [e.file, e.reason] : []))).toEqual([
      [f.workspaceFile, 'breakers.per_tool_rpm must be a positive integer (got 0)'],
      [f.rulesFile, '"tool:*": globs are not allowed; write one rule per name'],
    ]);
  });

  it('renamed over the old file (written whole first) or there from the start: judged at once, no settle wait', async () => {
    const f = await layout();
    writeInPlace(f.workspaceFile, '{"breakers": {"per_tool_rpm": 0}}\n', () => {});
    const { policy, events } = open(f);
    // At start nothing is in force to keep: refused at once, and recorded at once.
    expect(policy.current()).toMatchObject({ ok: false, kind: 'policy_denied' });
    expect(failures(events)).toEqual([
      expect.objectContaining({ kept: 'nothing', reason: 'breakers.per_tool_rpm must be a positive integer (got 0)' }),
    ]);
    const replace = (text: string) => {
      const tmp = `${f.workspaceFile}.tmp`;
      writeInPlace(tmp, text, () => {});
      renameSync(tmp, f.workspaceFile);
    };
    replace('{"breakers": {"per_tool_rpm": 5}}\n');
    expect(snap(policy).policy.breakers.per_tool_rpm).toBe(5);
    replace('{"breakers": {"per_tool_rpm": -5}}\n');
    expect(snap(policy).policy.breakers.per_tool_rpm).toBe(5);
    expect(failures(events).at(-1)).toMatchObject({
      kept: 'last_good',
      reason: 'breakers.per_tool_rpm must be a positive integer (got -5)',
    });
    for (let k = 0; k < 50; k++) policy.current();
    expect(failures(events)).toHaveLength(2);
  });
});
