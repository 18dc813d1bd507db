import type { ErrorObject, ValidateFunction } from 'ajv';
import schema from '../schema/policy.schema.json' with { type: 'json' };
import { closestKey, lineColumn, pointerPath, pointerToken, readJsonText, valueAt } from './json-document.js';
import generatedValidator from './policy-validator.generated.js';

/** Resource requests and limits of one call. */
export interface Budget {
  /** Wall-clock time of a call. */
  timeout_ms: number;
  /** CPU seconds of a call. */
  cpu_s: number;
  /** Stdout bytes kept; the rest is spilled to an artifact. */
  output_cap: number;
  /** Bytes the tool may write to its artifacts directory in all (a capped tmpfs inside the sandbox). */
  artifacts_bytes: number;
}

/** The budget fields, in the order they are documented. */
export const BUDGET_FIELDS = ['timeout_ms', 'cpu_s', 'output_cap', 'artifacts_bytes'] as const;

/** Sandbox axes a persona may have opened (all closed by default). */
export interface SandboxOverride {
  network?: 'allow' | 'deny';
  loopback?: 'allow' | 'deny';
  private_networks?: 'allow' | 'deny';
  allow_domains?: string[];
  deny_domains?: string[];
  allow_ports?: number[];
}

export interface BreakerSettings {
  per_tool_rpm: number;
  per_session_forge_count: number;
  failure_threshold: number;
  cooldown_s: number;
}

/** One policy.json as written: every key optional (see schema/policy.schema.json). */
export interface PolicyDocument {
  $schema?: string;
  forbidden_tool_names?: string[];
  breakers?: Partial<BreakerSettings>;
  persona_namespaces?: Record<string, string>;
  operator_personas?: string[];
  persona_sandbox_overrides?: Record<string, SandboxOverride>;
  persona_secret_allow?: Record<string, string[]>;
  budgets?: { defaults?: Partial<Budget>; ceilings?: Partial<Budget> };
  bind_roots?: string[];
  bind_allow?: string[];
  runtimes?: { allow?: string[] };
  toolsmith?: Partial<Omit<ToolsmithPolicy, 'mode'>> & { mode?: Record<string, ToolsmithMode> };
  hooks?: { project?: boolean; network?: SandboxOverride };
  secret_delivery?: Record<string, SecretDelivery>;
}

/**
 * How a secret reaches a run: `env`, in the tool's environment (redacted from what comes out), or
 * `inject`, as a placeholder the egress proxy replaces with the value only in those request
 * headers (in that `format`, `{}` standing for it; default `{}`), for those hosts.
 */
export type SecretDelivery = 'env' | { inject: { hosts: string[]; headers: string[]; format?: string } };

/** How a persona gets new tools: `direct` (forge_tool) or `governed` (forge_propose, then approval). */
export type ToolsmithMode = 'direct' | 'governed';

/** The toolsmith's section of the policy in force (see schema/policy.schema.json, `toolsmith`). */
export interface ToolsmithPolicy {
  enabled: boolean;
  paused: boolean;
  /** By persona; `*` for the others. */
  mode: Readonly<Record<string, ToolsmithMode>>;
  gap_recurrence_threshold: number;
  gap_window_hours: number;
  capability_allow: readonly string[];
  approvers: readonly string[];
  /** An operator persona may approve through its MCP client, confirmed by the human there (elicitation). */
  approve_in_client: boolean;
  cycle_interval_seconds: number;
  gap_store_max: number;
}

/** The merged policy in force: every key present. */
export interface EffectivePolicy {
  forbidden_tool_names: readonly string[];
  breakers: Readonly<BreakerSettings>;
  persona_namespaces: Readonly<Record<string, string>>;
  /** Personas that may remove and promote tools they do not own (see `checkToolOwner`). */
  operator_personas: readonly string[];
  persona_sandbox_overrides: Readonly<Record<string, Readonly<SandboxOverride>>>;
  persona_secret_allow: Readonly<Record<string, readonly string[]>>;
  budgets: { readonly defaults: Readonly<Budget>; readonly ceilings: Readonly<Budget> };
  bind_roots: readonly string[];
  /** Exact paths that may be bound although they are where a host program finds code to run. */
  bind_allow: readonly string[];
  runtimes: { readonly allow: readonly string[] };
  toolsmith: Readonly<ToolsmithPolicy>;
  /** The call hooks: whether a project's own run too (the home's always do), and the network their sandboxes get (none when absent). */
  hooks: { readonly project: boolean; readonly network?: Readonly<SandboxOverride> };
  /** How each secret is delivered (see {@link SecretDelivery}); a secret with no entry: `env`. */
  secret_delivery: Readonly<Record<string, Readonly<SecretDelivery>>>;
}

/** The token bind_roots entries use for the project directory. */
// biome-ignore lint/suspicious/noTemplateCurlyInString: a literal token of the policy format, not a template
export const PROJECT_TOKEN = '${project}';

/**
 * The bundle defaults every document merges over: meta-tool names reserved, breakers on, no
 * persona namespaces, network and secrets closed for everyone, binds inside the project only.
 */
export const DEFAULT_POLICY: EffectivePolicy = deepFreeze({
  forbidden_tool_names: ['forge_*'],
  breakers: { per_tool_rpm: 60, per_session_forge_count: 50, failure_threshold: 5, cooldown_s: 60 },
  persona_namespaces: {},
  operator_personas: [],
  persona_sandbox_overrides: {},
  persona_secret_allow: {},
  budgets: {
    defaults: { timeout_ms: 30_000, cpu_s: 30, output_cap: 1 << 20, artifacts_bytes: 64 << 20 },
    ceilings: { timeout_ms: 300_000, cpu_s: 300, output_cap: 16 << 20, artifacts_bytes: 1 << 30 },
  },
  bind_roots: [PROJECT_TOKEN],
  bind_allow: [],
  runtimes: { allow: ['python3', 'python3.*', 'node', 'bash', 'sh'] },
  toolsmith: {
    enabled: false,
    paused: false,
    mode: {},
    gap_recurrence_threshold: 3,
    gap_window_hours: 24,
    capability_allow: [],
    approvers: [],
    approve_in_client: false,
    cycle_interval_seconds: 3600,
    gap_store_max: 10_000,
  },
  hooks: { project: false },
  secret_delivery: {},
});

/** The JSON Schema of a policy document (draft 2020-12), as published in `schema/`. */
export const POLICY_SCHEMA: Readonly<Record<string, unknown>> = schema;

/**
 * Merges documents over the defaults, least specific first (defaults ← user ← workspace):
 * - `forbidden_tool_names`, `bind_roots` and `operator_personas`: union, in order, without duplicates (a document can
 *   add, never remove: to lift a restriction, edit the document that sets it);
 * - `breakers`, `budgets.defaults`, `budgets.ceilings`: field by field, the later document wins;
 * - `persona_namespaces`, `persona_sandbox_overrides`, `persona_secret_allow`: by persona, the later
 *   document's entry replaces the whole entry;
 * - `runtimes.allow`: the later document's list replaces the earlier one;
 * - `toolsmith`: field by field, the later document wins (its lists replace), except `paused`,
 *   which is true when any document says so, and `mode`, merged by persona;
 * - `hooks.project`: the later document wins;
 * - `secret_delivery`: by secret name, the later document's entry replaces the earlier one.
 * A default budget above its ceiling is lowered to the ceiling.
 */
export function mergePolicies(...docs: readonly PolicyDocument[]): EffectivePolicy {
  const d = DEFAULT_POLICY;
  const out = {
    forbidden_tool_names: [...d.forbidden_tool_names],
    breakers: { ...d.breakers },
    persona_namespaces: { ...d.persona_namespaces } as Record<string, string>,
    operator_personas: [...d.operator_personas],
    persona_sandbox_overrides: { ...d.persona_sandbox_overrides } as Record<string, SandboxOverride>,
    persona_secret_allow: { ...d.persona_secret_allow } as Record<string, readonly string[]>,
    budgets: { defaults: { ...d.budgets.defaults }, ceilings: { ...d.budgets.ceilings } },
    bind_roots: [...d.bind_roots],
    bind_allow: [...d.bind_allow],
    runtimes: { allow: [...d.runtimes.allow] },
    toolsmith: { ...d.toolsmith, mode: { ...d.toolsmith.mode } } as ToolsmithPolicy & { mode: Record<string, ToolsmithMode> },
    hooks: { ...d.hooks } as { project: boolean; network?: SandboxOverride },
    secret_delivery: { ...d.secret_delivery } as Record<string, SecretDelivery>,
  };
  const union = (into: string[], more: readonly string[] | undefined) => {
    for (const x of more ?? []) if (!into.includes(x)) into.push(x);
  };
  for (const doc of docs) {
    union(out.forbidden_tool_names, doc.forbidden_tool_names);
    union(out.bind_roots, doc.bind_roots);
    union(out.bind_allow, doc.bind_allow);
    union(out.operator_personas, doc.operator_personas);
    Object.assign(out.breakers, doc.breakers);
    Object.assign(out.budgets.defaults, doc.budgets?.defaults);
    Object.assign(out.budgets.ceilings, doc.budgets?.ceilings);
    Object.assign(out.persona_namespaces, doc.persona_namespaces);
    for (const [p, o] of Object.entries(doc.persona_sandbox_overrides ?? {})) out.persona_sandbox_overrides[p] = structuredClone(o);
    for (const [p, names] of Object.entries(doc.persona_secret_allow ?? {})) out.persona_secret_allow[p] = [...names];
    if (doc.runtimes?.allow) out.runtimes.allow = [...doc.runtimes.allow];
    if (doc.toolsmith) {
      const { mode, paused, capability_allow, approvers, ...rest } = doc.toolsmith;
      Object.assign(out.toolsmith, rest);
      if (paused === true) out.toolsmith.paused = true;
      if (capability_allow) out.toolsmith.capability_allow = [...capability_allow];
      if (approvers) out.toolsmith.approvers = [...approvers];
      Object.assign(out.toolsmith.mode, mode);
    }
    if (doc.hooks?.project !== undefined) out.hooks.project = doc.hooks.project;
    if (doc.hooks?.network !== undefined) out.hooks.network = structuredClone(doc.hooks.network);
    // Defined, not assigned: a secret may be named `__proto__`.
    for (const [name, how] of Object.entries(doc.secret_delivery ?? {}))
      Object.defineProperty(out.secret_delivery, name, {
        value: structuredClone(how),
        enumerable: true,
        writable: true,
        configurable: true,
      });
  }
  for (const k of BUDGET_FIELDS) {
    out.budgets.defaults[k] = Math.min(out.budgets.defaults[k], out.budgets.ceilings[k]);
  }
  return deepFreeze(out);
}

/** Where and why a policy file was refused. `message` is the whole of it, ready to show. */
export interface PolicyProblem {
  file: string;
  line?: number;
  column?: number;
  /** JSON pointer of the offending value (schema errors). */
  pointer?: string;
  reason: string;
  /** `file:line:column: reason`. */
  message: string;
}

export type ParseResult<T> = { ok: true; value: T } | { ok: false; problem: PolicyProblem };

// The schema compiled ahead of time (scripts/generate-validator.mjs): no Ajv is loaded and
// nothing compiled when a process reads its first policy.
const validator = generatedValidator as unknown as ValidateFunction;

/**
 * Parses and validates one policy.json. Refusals name the file, line and column, the JSON pointer
 * and the rule: `policy.json:4:21: breakers.per_tool_rpm must be an integer ≥ 1 (got "30")`.
 */
export function parsePolicyDocument(text: string, file: string): ParseResult<PolicyDocument> {
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1); // a BOM some editors write; columns count from after it
  const fail = (offset: number | undefined, reason: string, pointer?: string): ParseResult<PolicyDocument> => {
    const where = offset === undefined ? undefined : lineColumn(text, offset);
    const at = where ? `${file}:${where.line}:${where.column}` : file;
    return {
      ok: false,
      problem: { file, ...where, ...(pointer !== undefined ? { pointer } : {}), reason, message: `${at}: ${reason}` },
    };
  };
  if (text.trim() === '') return fail(0, 'the file is empty; write {} for an empty policy');
  const parsed = readJsonText(text);
  if (!parsed.ok) return fail(parsed.offset, `not valid JSON: ${parsed.reason}`);
  if (validator(parsed.value)) {
    const doc = parsed.value as PolicyDocument;
    for (const k of BUDGET_FIELDS) {
      const def = doc.budgets?.defaults?.[k];
      const ceil = doc.budgets?.ceilings?.[k];
      if (def !== undefined && ceil !== undefined && def > ceil) {
        const pointer = `/budgets/defaults/${k}`;
        return fail(parsed.offsets.get(pointer), `budgets.defaults.${k} (${def}) is above budgets.ceilings.${k} (${ceil})`, pointer);
      }
    }
    return { ok: true, value: doc };
  }
  const err = pickError(validator.errors ?? []);
  if (!err) return fail(0, 'does not match the policy schema');
  const { pointer, reason } = describeError(err, parsed.value);
  return fail(parsed.offsets.get(pointer) ?? parsed.offsets.get(err.instancePath), reason, pointer);
}

function pickError(errors: readonly ErrorObject[]): ErrorObject | undefined {
  // A bad persona name shows up as a pattern error under propertyNames, then propertyNames itself.
  return errors.find((e) => e.keyword === 'propertyNames') ?? errors[0];
}

const PATTERN_HELP: Record<string, string> = {
  nameGlob: 'a tool-name glob: 1–64 of letters, digits, _ . - and the wildcards * ?',
  persona: 'a persona name: a letter, then letters, digits, _ or - (at most 64)',
  namespace: 'a namespace: dot-separated words of letters, digits, _ and -, each starting with a letter',
  secretName: 'a secret name: letters, digits and _, not starting with a digit',
  domainPattern: 'a domain (example.com) or a suffix pattern (*.example.com)',
};

function describeError(e: ErrorObject, doc: unknown): { pointer: string; reason: string } {
  const pointer = e.instancePath;
  const name = pointerPath(pointer) || 'the document';
  const got = (v: unknown) => `(got ${JSON.stringify(v)})`;
  const value = valueAt(doc, pointer);
  switch (e.keyword) {
    case 'additionalProperties': {
      const key = String(e.params.additionalProperty);
      const known = Object.keys((e.parentSchema as { properties?: object } | undefined)?.properties ?? {}).filter((k) => k !== '$schema');
      const guess = closestKey(key, known);
      return {
        pointer: `${pointer}/${pointerToken(key)}`,
        reason: `unknown key "${key}" in ${name}${guess ? ` (did you mean "${guess}"?)` : known.length ? ` (expected one of: ${known.join(', ')})` : ''}`,
      };
    }
    case 'propertyNames': {
      const key = String(e.params.propertyName);
      const def = /\$defs\/(\w+)/.exec(JSON.stringify(e.schema))?.[1] ?? '';
      return {
        pointer: `${pointer}/${pointerToken(key)}`,
        reason: `${name} has a key ${JSON.stringify(key)} that is not ${PATTERN_HELP[def] ?? 'a valid name'}`,
      };
    }
    case 'type':
      return { pointer, reason: `${name} must be ${article(String(e.params.type))} ${got(value)}` };
    case 'minimum':
      return {
        pointer,
        reason: `${name} must be ${e.params.limit === 1 ? 'a positive integer' : `at least ${e.params.limit}`} ${got(value)}`,
      };
    case 'maximum':
      return { pointer, reason: `${name} must be at most ${e.params.limit} ${got(value)}` };
    case 'enum':
      return {
        pointer,
        reason: `${name} must be one of ${(e.params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')} ${got(value)}`,
      };
    case 'pattern': {
      const def = /\$defs\/(\w+)\/pattern$/.exec(e.schemaPath)?.[1];
      if (def && PATTERN_HELP[def]) return { pointer, reason: `${name} must be ${PATTERN_HELP[def]} ${got(value)}` };
      if (pointer.startsWith('/bind_roots/') || pointer.startsWith('/bind_allow/'))
        return { pointer, reason: `${name} must be an absolute path, ~/… or \${project}/… ${got(value)}` };
      return { pointer, reason: `${name} must match ${e.params.pattern} ${got(value)}` };
    }
    case 'maxLength':
      return { pointer, reason: `${name} must be at most ${e.params.limit} characters ${got(value)}` };
    case 'maxItems':
      return {
        pointer,
        reason: `${name} has ${Array.isArray(value) ? value.length : 'too many'} entries, more than the limit of ${e.params.limit}; a policy this large is almost certainly generated by mistake: trim it`,
      };
    case 'maxProperties':
      return {
        pointer,
        reason: `${name} has ${value && typeof value === 'object' ? Object.keys(value).length : 'too many'} entries, more than the limit of ${e.params.limit}; a policy this large is almost certainly generated by mistake: trim it`,
      };
    default:
      return { pointer, reason: `${name} ${e.message ?? 'is not valid'} ${got(value)}` };
  }
}

function article(type: string): string {
  return type === 'integer' || type === 'object' || type === 'array' ? `an ${type}` : `a ${type}`;
}

function deepFreeze<T>(v: T): T {
  if (v && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}
