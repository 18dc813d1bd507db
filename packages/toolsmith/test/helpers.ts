import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { verifyLog } from '@forge/audit-chain';
import { createForge, type Forge } from '@forge/runner';
import { probe } from '@forge/sandbox';
import { expect, onTestFinished } from 'vitest';
import { createToolsmith, type Toolsmith } from '../src/index.js';

/** The policy most tests run under: governed, `text.*` authorable, two approvers, threshold 2. */
export const GOVERNED = {
  toolsmith: {
    enabled: true,
    mode: { '*': 'governed' },
    capability_allow: ['text.*'],
    approvers: ['alice', 'bob'],
    gap_recurrence_threshold: 2,
  },
};

export interface Fixture {
  forge: Forge;
  smith: Toolsmith;
  root: string;
  project: string;
  /** Rewrites the workspace policy (a new inode: the next step sees it). */
  policy(doc: unknown): void;
  /** The audit log's entries, read from the file. */
  audit(): { type: string; data: Record<string, unknown> }[];
}

/** Fails (never skips) when this host cannot sandbox. */
export async function requireSandbox(): Promise<void> {
  const host = await probe();
  if (!host.ok)
    throw new Error(
      `these tests need a working bwrap sandbox (apt-get install -y bubblewrap): ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')}`,
    );
}

/**
 * A real forge and its toolsmith over a fresh home and project (removed afterwards; the audit
 * log must verify when the test ends).
 */
export async function setup(policy: unknown = GOVERNED): Promise<Fixture> {
  await requireSandbox();
  const root = await mkdtemp(join(tmpdir(), 'forge-toolsmith-test-'));
  const home = join(root, 'home');
  const project = join(root, 'project');
  mkdirSync(home, { recursive: true, mode: 0o700 });
  mkdirSync(join(project, '.forge'), { recursive: true, mode: 0o700 });
  const policyFile = join(project, '.forge', 'policy.json');
  const write = (doc: unknown) => {
    const tmp = `${policyFile}.tmp-${Math.random().toString(36).slice(2)}`;
    writeFileSync(tmp, JSON.stringify(doc), { mode: 0o600 });
    renameSync(tmp, policyFile);
  };
  write(policy);
  let smith: Toolsmith | undefined;
  const forge = await createForge({ home, project, env: {}, onUnknownTool: (n, c) => smith?.unknownTool(n, c) });
  smith = createToolsmith({ forge, onWarning: () => {} });
  const made = smith;
  onTestFinished(async () => {
    try {
      await made.close();
      await forge.close({ graceMs: 2000 });
      const v = await verifyLog(forge.paths.auditLog);
      expect(v.ok, `the audit log must verify: ${JSON.stringify(v.first_bad)}`).toBe(true);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
  return {
    forge,
    smith: made,
    root,
    project,
    policy: write,
    audit: () =>
      readFileSync(forge.paths.auditLog, 'utf8')
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as { type: string; data: Record<string, unknown> }),
  };
}

/** A typical blueprint: counts words (4-property schema, 5 examples, deterministic). */
export function wordCount(over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
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
    output_schema: {
      type: 'object',
      properties: { words: { type: 'integer' }, top: { type: 'array' } },
      required: ['words'],
    },
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
    ...over,
  };
}

export { dirname };
