import { findUnsafeCharacter, type JsonSchema, type ToolExample, type ToolMeta } from '@forge/registry';
import type { GapKind } from './types.js';

/**
 * The arguments of `forge_request` and `forge_propose`, read strictly: every refusal names the
 * field and what to send. A blueprint's suggested name, sandbox, network and secrets settings are
 * never taken (forge derives the name; policy gives the rest); they are reported as ignored.
 */

type Refused = { ok: false; kind: 'validation_failed'; message: string };

const refuse = (message: string): Refused => ({ ok: false, kind: 'validation_failed', message });

/** What `forge_request` takes. */
export interface RequestArgs {
  ok: true;
  capability: string;
  description: string;
  example_inputs?: unknown[];
}

/** What `forge_propose` takes, as forge will use it. */
export interface Blueprint {
  ok: true;
  capability: string;
  gap?: { kind: GapKind; signature: string };
  description: string;
  input_schema: JsonSchema;
  output_schema?: JsonSchema;
  impl: string;
  runtime: string;
  examples: ToolExample[];
  meta?: ToolMeta;
  /** Fields sent but not taken, by name. */
  ignored: string[];
}

const REQUEST_KEYS = ['capability', 'description', 'example_inputs'];
const PROPOSE_KEYS = [
  'capability',
  'gap',
  'description',
  'input_schema',
  'output_schema',
  'impl',
  'runtime',
  'examples',
  'meta',
  'deterministic',
];
/** Sent by models that think they may choose these: never taken. */
const IGNORED_KEYS = ['name', 'tool_name', 'network', 'sandbox', 'secrets', 'env', 'binds', 'mounts', 'scope', 'state', 'version'];
/** The meta a blueprint may ask for (policy clamps budgets); `secrets` is never taken. */
const META_KEYS = ['deterministic', 'timeout_ms', 'cpu_s', 'output_cap', 'annotations', 'task_support'];

const MAX_DESCRIPTION = 2000;
const MAX_IMPL = 256 * 1024;
const MAX_EXAMPLES = 20;

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function unknownKeys(
  args: Record<string, unknown>,
  known: readonly string[],
  ignorable: readonly string[],
  what: string,
): Refused | undefined {
  const bad = Object.keys(args).filter((k) => !known.includes(k) && !ignorable.includes(k));
  if (bad.length === 0) return undefined;
  return refuse(`${what} does not take ${bad.map((k) => JSON.stringify(k)).join(', ')}; it takes ${known.join(', ')}`);
}

/**
 * A text field of a blueprint. A reviewer reads it on a terminal, so it may not carry a character
 * that changes or hides what they see (a terminal escape, a bare carriage return, a bidi override,
 * a zero-width character: `findUnsafeCharacter`); the refusal names the line and column.
 */
function text(args: Record<string, unknown>, key: string, max: number, what: string): string | Refused {
  const v = args[key];
  if (typeof v !== 'string' || v.trim() === '') return refuse(`${what}: ${key} must be a non-empty string`);
  if (v.length > max) return refuse(`${what}: ${key} is ${v.length} characters; at most ${max}`);
  const bad = findUnsafeCharacter(v);
  if (bad) {
    return refuse(
      `${what}: ${key} line ${bad.line}, column ${bad.column} holds ${bad.what}, which would change or hide what a reviewer sees on a terminal; remove it (in code, write an escape such as "\\x1b" or "\\u202e" instead of the character itself)`,
    );
  }
  return v;
}

/** Reads `forge_request {capability, description, example_inputs?}`. */
export function readRequest(args: unknown): RequestArgs | Refused {
  if (!isObject(args)) return refuse('forge_request takes an object {capability, description, example_inputs?}');
  const extra = unknownKeys(args, REQUEST_KEYS, [], 'forge_request');
  if (extra) return extra;
  const capability = text(args, 'capability', 200, 'forge_request');
  if (typeof capability !== 'string') return capability;
  const description = text(args, 'description', 1000, 'forge_request');
  if (typeof description !== 'string') return description;
  const ex = args.example_inputs;
  if (ex !== undefined && (!Array.isArray(ex) || ex.length > 5 || !ex.every(isObject)))
    return refuse('forge_request: example_inputs must be an array of at most 5 objects (inputs the tool would take)');
  return { ok: true, capability, description, ...(ex ? { example_inputs: ex } : {}) };
}

/** Reads `forge_propose {capability | gap, description, input_schema, output_schema?, impl, runtime, examples, meta?}`. */
export function readBlueprint(args: unknown): Blueprint | Refused {
  const what = 'forge_propose';
  if (!isObject(args))
    return refuse(`${what} takes an object {capability, description, input_schema, output_schema?, impl, runtime, examples}`);
  const extra = unknownKeys(args, PROPOSE_KEYS, IGNORED_KEYS, what);
  if (extra) return extra;
  const ignored = IGNORED_KEYS.filter((k) => Object.hasOwn(args, k));
  let capability: string | undefined;
  let gap: Blueprint['gap'];
  if (args.gap !== undefined) {
    if (typeof args.gap !== 'string' || args.gap.trim() === '')
      return refuse(`${what}: gap must be the signature of a missing_tool gap (as forge_request or the unknown_tool message named it)`);
    const sig = args.gap.startsWith('missing_tool:') ? args.gap.slice('missing_tool:'.length) : args.gap;
    if (args.gap.startsWith('service_absent:'))
      return refuse(`${what}: a service_absent gap is an operator signal (a gateway server that cannot run), never authored`);
    gap = { kind: 'missing_tool', signature: sig };
    capability = sig;
  }
  if (args.capability !== undefined) {
    const c = text(args, 'capability', 200, what);
    if (typeof c !== 'string') return c;
    capability = c;
  }
  if (capability === undefined) return refuse(`${what}: give the capability (e.g. "text.word_count") or the gap it answers`);
  const description = text(args, 'description', MAX_DESCRIPTION, what);
  if (typeof description !== 'string') return description;
  if (!isObject(args.input_schema)) return refuse(`${what}: input_schema must be a JSON Schema object ({"type": "object", …})`);
  if (args.output_schema !== undefined && !isObject(args.output_schema))
    return refuse(`${what}: output_schema must be a JSON Schema object`);
  const impl = text(args, 'impl', MAX_IMPL, what);
  if (typeof impl !== 'string') return impl;
  const runtime = text(args, 'runtime', 64, what);
  if (typeof runtime !== 'string') return runtime;
  const examples = args.examples;
  if (!Array.isArray(examples) || examples.length === 0)
    return refuse(
      `${what}: examples must be a non-empty array of {input, expect?}: each runs in the sandbox before anyone reviews the tool`,
    );
  if (examples.length > MAX_EXAMPLES) return refuse(`${what}: ${examples.length} examples; at most ${MAX_EXAMPLES}`);
  for (const [i, ex] of examples.entries()) {
    if (!isObject(ex) || !isObject(ex.input) || Object.keys(ex).some((k) => k !== 'input' && k !== 'expect'))
      return refuse(`${what}: examples[${i}] must be {input: {…}, expect?: …}`);
  }
  let meta: ToolMeta | undefined;
  if (args.meta !== undefined) {
    if (!isObject(args.meta)) return refuse(`${what}: meta must be an object`);
    const taken: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(args.meta)) {
      if (META_KEYS.includes(k)) taken[k] = v;
      else ignored.push(`meta.${k}`);
    }
    meta = taken as ToolMeta;
  }
  if (args.deterministic !== undefined) {
    if (typeof args.deterministic !== 'boolean') return refuse(`${what}: deterministic must be true or false`);
    meta = { ...(meta ?? {}), deterministic: args.deterministic };
  }
  return {
    ok: true,
    capability,
    ...(gap ? { gap } : {}),
    description,
    input_schema: args.input_schema,
    ...(args.output_schema ? { output_schema: args.output_schema as JsonSchema } : {}),
    impl,
    runtime,
    examples: examples as ToolExample[],
    ...(meta && Object.keys(meta).length > 0 ? { meta } : {}),
    ignored,
  };
}
