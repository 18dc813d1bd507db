import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type CliResult, type Connected, connect, runCli, type Scratch } from './helpers.js';

/** Fixtures of the toolsmith's CLI tests: the governed policy, blueprints, and the audit log read back. */

/** Governed for everyone, `text.*` authorable, alice and bob approve, a gap qualifies at 2. */
export const GOVERNED = {
  enabled: true,
  mode: { '*': 'governed' },
  capability_allow: ['text.*'],
  approvers: ['alice', 'bob'],
  gap_recurrence_threshold: 2,
} as const;

/**
 * Writes the workspace policy whole and renames it in (a running server judges it at its next step).
 * `newline` ends the file with one: the same policy in other bytes, which a running server reads
 * again at its next look (and audits as `policy.reloaded`), so that the test can see it looked.
 */
export function writePolicy(s: Scratch, toolsmith: Record<string, unknown> = GOVERNED, o: { newline?: boolean } = {}): void {
  const file = join(s.project, '.forge', 'policy.json');
  const tmp = `${file}.tmp`;
  writeFileSync(tmp, `${JSON.stringify({ toolsmith })}${o.newline ? '\n' : ''}`, { mode: 0o600 });
  renameSync(tmp, file);
}

const V1_IMPL = 'import json, sys\na = json.load(sys.stdin)\nprint(json.dumps({"ok": True, "data": {"reversed": a["text"][::-1]}}))';

/** `text.reverse`: a good blueprint (two examples, an output schema, deterministic). `impl` and `examples` replaceable. */
export function reverseBlueprint(over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    capability: 'text.reverse',
    description: 'Reverses a text.',
    input_schema: {
      type: 'object',
      properties: { text: { type: 'string', maxLength: 1000 } },
      required: ['text'],
      additionalProperties: false,
    },
    output_schema: { type: 'object', properties: { reversed: { type: 'string' } }, required: ['reversed'] },
    runtime: 'python3',
    impl: V1_IMPL,
    examples: [
      { input: { text: 'abc' }, expect: { reversed: 'cba' } },
      { input: { text: '' }, expect: { reversed: '' } },
    ],
    deterministic: true,
    ...over,
  };
}

/** Version 2: the same answers to version 1's examples, but "which" answers "v2". */
export const V2_IMPL = V1_IMPL.replace('a["text"][::-1]', '"v2" if a["text"] == "which" else a["text"][::-1]');

/** What forge_propose answered: the proposal (validated or failed), or the refusal. */
export interface Proposed {
  ok: boolean;
  kind?: string;
  message?: string;
  proposal: { id: string; state: string; name: string; validation?: { summary: string } };
}

/** Proposes `blueprint` through `forge serve`'s forge_propose, as the connected client's persona. */
export async function propose(c: Connected, blueprint: Record<string, unknown>): Promise<Proposed> {
  const { env } = await c.call('forge_propose', blueprint);
  if (!env.ok)
    return { ok: false, kind: env.error?.kind, message: env.error?.message, proposal: { id: '', state: '', name: '' } } as Proposed;
  return { ok: true, proposal: env.data as Proposed['proposal'] };
}

/** `forge serve` over stdio for persona `agent` (the proposer in these tests). */
export const serveAs = (s: Scratch, persona = 'agent'): Promise<Connected> => connect(s, { env: { FORGE_PERSONA: persona } });

/** Runs `forge <args>` in the scratch project. */
export const forge = (s: Scratch, args: string[], env: Record<string, string> = {}): Promise<CliResult> =>
  runCli(args, { cwd: s.project, env: { ...s.env, ...env }, timeoutMs: 60_000 });

/** `forge <args> --json`, exit code and parsed stdout. */
export async function forgeJson<T = Record<string, unknown>>(
  s: Scratch,
  args: string[],
): Promise<{ code: number | null; data: T; stderr: string }> {
  const r = await forge(s, [...args, '--json']);
  let data: T;
  try {
    data = JSON.parse(r.stdout) as T;
  } catch {
    throw new Error(`forge ${args.join(' ')} --json printed no JSON (exit ${r.code}): ${r.stdout}${r.stderr}`);
  }
  return { code: r.code, data, stderr: r.stderr };
}

/** One audit entry as read from the log file. */
export interface Entry {
  seq: number;
  /** When it was appended (ISO 8601, UTC). */
  ts: string;
  type: string;
  data: Record<string, unknown>;
}

/** Every entry of the scratch home's audit log. */
export function auditEntries(s: Scratch): Entry[] {
  return readFileSync(join(s.home, 'audit', 'forge.log'), 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Entry);
}

/** The toolsmith's story in the log: its `toolsmith.*` types, in order, without the trial runs. */
export function story(s: Scratch): string[] {
  return auditEntries(s)
    .map((e) => e.type)
    .filter((t) => t.startsWith('toolsmith.') && t !== 'toolsmith.trial_run');
}
