import { mkdirSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createForge, type Forge, type ForgeEvent } from '@forge/runner';
import { tempDir, waitFor } from '@forge/test-utils';
import { expect, onTestFinished } from 'vitest';

const EXAMPLES = resolve(import.meta.dirname, '../../../examples');

/** A forge tool spec as the examples hold it. */
type Spec = Record<string, unknown> & { name: string };

/** A python tool that sleeps until it is killed (for cancellation). */
export const SLEEPER: Spec = {
  name: 'sleeper',
  description: 'sleeps for half a minute',
  runtime: 'python3',
  input_schema: { type: 'object', properties: {}, additionalProperties: false },
  impl: 'import json, time\ntime.sleep(30)\nprint(json.dumps({"ok": True, "data": "woke"}))\n',
};

/** A python tool forged mid-session. */
export const LATE: Spec = {
  name: 'late.greet',
  description: 'greets someone',
  runtime: 'python3',
  input_schema: { type: 'object', properties: { who: { type: 'string' } }, required: ['who'], additionalProperties: false },
  impl: 'import json, sys\nargs = json.load(sys.stdin)\nprint(json.dumps({"ok": True, "data": "hello " + args["who"]}))\n',
};

export interface Fixture {
  forge: Forge;
  /** The audit events of the calls so far (`forge.called`): name, ok, kind. */
  calls(): { name: unknown; ok: unknown; kind: unknown }[];
  /** How many sandboxed runs have started so far. */
  runs(): number;
  /** Resolves once more than `before` sandboxed runs have started. */
  runStarted(before: number): Promise<void>;
  /** Resolves with the audited call of `name` once there is one. */
  called(name: string): Promise<{ name: unknown; ok: unknown; kind: unknown }>;
  add(spec: Spec): Promise<void>;
}

/** A forge over a fresh home and project, with `math.fib` (examples/fib under a dotted name) and {@link SLEEPER}. */
export async function fixture(): Promise<Fixture> {
  const root = await tempDir('forge-adapters-');
  const home = join(root, 'home');
  const project = join(root, 'project');
  mkdirSync(join(project, '.forge'), { recursive: true });
  const forge = await createForge({ home, project, env: {} });
  onTestFinished(() => forge.close());
  const events: ForgeEvent[] = [];
  forge.on('audit', (e) => events.push(e));
  const { loadExample } = (await import(pathToFileURL(join(EXAMPLES, 'index.mjs')).href)) as { loadExample(name: string): Spec };
  const add = async (spec: Spec) => {
    const r = await forge.forgeTool(spec);
    expect(r.ok, JSON.stringify(r)).toBe(true);
  };
  await add({ ...loadExample('fib'), name: 'math.fib' });
  await add(SLEEPER);
  const calls = () => events.filter((e) => e.type === 'forge.called').map((e) => ({ name: e.data.name, ok: e.data.ok, kind: e.data.kind }));
  const runs = () => readdirSync(forge.paths.runsDir).filter((f) => !f.endsWith('.jsonl')).length;
  return {
    forge,
    add,
    calls,
    runs,
    runStarted: (before) => waitFor(`a sandboxed run after the first ${before}`, () => runs() > before).then(() => {}),
    called: (name) => waitFor(`the audit entry of a call of ${name}`, () => calls().find((c) => c.name === name)),
  };
}
