/** Scopes from the most specific to the least: a name in an earlier scope shadows later ones. */
export const SCOPES = ['task', 'session', 'project', 'user'] as const;

/** Where a tool lives. See `SCOPES` for the lookup order. */
export type Scope = (typeof SCOPES)[number];

/** Lifecycle states a stored tool may have. Forged tools are `active`; the others belong to the toolsmith. */
export const TOOL_STATES = ['active', 'pending', 'validated', 'retired'] as const;

/** Lifecycle state stamped on a tool. Only `active` tools resolve, list and run. */
export type ToolState = (typeof TOOL_STATES)[number];

/** A JSON Schema object (the registry checks it compiles; it does not type its keywords). */
export type JsonSchema = { [key: string]: unknown };

/** Budget requests and hints; the policy clamps them. */
export interface ToolMeta {
  deterministic?: boolean;
  secrets?: string[];
  timeout_ms?: number;
  cpu_s?: number;
  output_cap?: number;
  /**
   * Whether an MCP client may get a call of this tool as a task (the `io.modelcontextprotocol/tasks`
   * extension of the 2026-07-28 era): `forbidden` (default), `optional`, `required`.
   */
  task_support?: 'forbidden' | 'optional' | 'required';
  /**
   * MCP tool annotations over those forge derives from the sandbox (`toolAnnotations` in
   * @forge/runner): a hint may only make the tool look less safe; a claim of more safety than the
   * sandbox enforces is ignored.
   */
  annotations?: {
    title?: string;
    readOnlyHint?: boolean;
    destructiveHint?: boolean;
    idempotentHint?: boolean;
    openWorldHint?: boolean;
  };
}

/** A sample call. `input` must match `input_schema`. */
export interface ToolExample {
  input: { [key: string]: unknown };
  expect?: unknown;
}

/** A tool spec as an agent submits it (see `schema/tool-spec.schema.json`). */
export interface ToolSpec {
  name: string;
  description: string;
  input_schema: JsonSchema;
  output_schema?: JsonSchema;
  impl: string;
  runtime: string;
  meta?: ToolMeta;
  examples?: ToolExample[];
}

/** Who forged a tool version. */
export interface CreatedBy {
  persona: string;
  session: string;
}

/** Where a promoted tool came from: the project directory and the digest it had there. */
export interface ToolOrigin {
  project: string;
  digest: string;
}

/** A stored tool: the spec plus the stamps the registry writes. Treat it as read-only. */
export interface StoredTool extends ToolSpec {
  version: number;
  /** `sha256:<hex>` over the canonical spec without stamps (see `digestSpec`). */
  digest: string;
  /** ISO 8601 time this version was written. */
  created_at: string;
  created_by: CreatedBy;
  scope: Scope;
  state: ToolState;
  origin?: ToolOrigin;
}

/** The kinds of expected failure this package returns (stable strings from forge's error kinds). */
export type RegistryFailureKind =
  | 'validation_failed'
  | 'name_taken'
  | 'name_forbidden'
  | 'unknown_tool'
  | 'tool_damaged'
  | 'promote_conflict'
  | 'internal';

/**
 * A live record that exists but cannot be used: a tool file cut short, not JSON, not a stored
 * tool, stored under another name's file, or not a regular file. The registry keeps it instead of
 * dropping it, so that it is listed as damaged, refused (`tool_damaged`) and removable; it is
 * never run. Only a record stored under a tool name (never a built-in) is kept this way; any
 * other is a `registry.load_failed` event only.
 */
export interface DamagedTool {
  /** The name it is stored under (the file store: the file name without `.json`). */
  name: string;
  scope: Scope;
  /** Where it is (see `StoreFailure.path`): a file, or a store's locator. */
  path: string;
  /** What is wrong with it, e.g. `not valid JSON: Unexpected end of JSON input`. */
  reason: string;
}

/** An expected failure: what happened, to what, and what to do, in `message`. */
export interface Failure<K extends string = RegistryFailureKind> {
  ok: false;
  kind: K;
  message: string;
}

/** One problem found in a spec: a JSON pointer (without the leading `/`) and what is wrong. */
export interface SpecProblem {
  /** e.g. `input_schema/properties/n/type`; `''` for the spec itself. */
  path: string;
  message: string;
}

/** A failed spec check: `message` joins the first problems as `path: message; …`. */
export interface ValidationFailure extends Failure<'validation_failed'> {
  problems: SpecProblem[];
}

/** Something the registry reports for the audit log (plain data). */
export interface LoadFailedEvent {
  type: 'registry.load_failed';
  scope: Scope;
  /** The file (or directory entry) that was skipped. */
  path: string;
  /** Why, e.g. `not valid JSON: Unexpected token …` or `file name "a.json" does not match the spec name "b"`. */
  reason: string;
}

/** Every event `onEvent` receives. */
export type RegistryEvent = LoadFailedEvent;
