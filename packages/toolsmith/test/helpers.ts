import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyLog } from '@forge/audit-chain';
import { createForge, type Forge } from '@forge/runner';
import { probe } from '@forge/sandbox';
import { requireSandbox as requireSandboxOn } from '@forge/test-utils';
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
export const requireSandbox = (): Promise<void> => requireSandboxOn(probe);

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

/** A typical blueprint (bench/word-count.json, which the benchmark runs too): counts words; a 4-property schema, 5 examples, deterministic. */
export function wordCount(over: Record<string, unknown> = {}): Record<string, unknown> {
  const base = JSON.parse(readFileSync(new URL('../bench/word-count.json', import.meta.url), 'utf8')) as Record<string, unknown>;
  return { ...base, ...over };
}
