/**
 * MCP tool annotations derived from what forge enforces, not from what a tool says of itself.
 *
 * What the sandbox lets a call touch: the run's own artifacts directory and tmpfs (never counted:
 * they are the call's output and scratch), the host paths the input names through `x-bind`
 * (read-only, or read-write for `"rw"`), and the network only when policy grants it to the
 * caller's persona (`persona_sandbox_overrides`, and `allow <p>_t network:default connect` when
 * allow-rules exist). From that:
 *
 * | facts                                   | readOnly | destructive | idempotent          | openWorld |
 * |-----------------------------------------|----------|-------------|---------------------|-----------|
 * | no `rw` bind, no network                | true     | false       | true                | false     |
 * | an `rw` bind in the input schema        | false    | true        | `meta.deterministic`| (network) |
 * | network granted to the persona          | false    | true        | `meta.deterministic`| true      |
 *
 * `meta.annotations` in the spec may override each hint, but only toward less safety: it may say
 * a tool writes (`readOnlyHint: false`), destroys, is not idempotent or reaches the world, never
 * the reverse of what the sandbox allows (`readOnlyHint: true` with an `rw` bind or network,
 * `destructiveHint: false` where writes are possible, `openWorldHint: false` with network,
 * `idempotentHint: true` where forge derived false). Such claims are ignored.
 */

/** What the sandbox grants a caller's runs (see `Forge.sandboxFacts`). */
export interface SandboxFacts {
  /** The persona's runs get forge's egress proxy (policy and allow-rules agree). */
  network: boolean;
}

/** MCP `ToolAnnotations` (2025-03-26 and later). */
export interface ToolAnnotations {
  title?: string;
  readOnlyHint: boolean;
  destructiveHint: boolean;
  idempotentHint: boolean;
  openWorldHint: boolean;
}

/** What {@link toolAnnotations} reads of a spec. */
export interface AnnotatedSpec {
  input_schema: unknown;
  meta?: { deterministic?: boolean; annotations?: Partial<ToolAnnotations> };
}

/**
 * The annotations of `spec` for a caller whose runs get `facts`. Pure; the schema scan is
 * remembered per schema object.
 */
export function toolAnnotations(spec: AnnotatedSpec, facts: SandboxFacts): ToolAnnotations {
  const binds = bindModes(spec.input_schema);
  const readOnly = !binds.rw && !facts.network;
  const derived: ToolAnnotations = {
    readOnlyHint: readOnly,
    destructiveHint: !readOnly,
    idempotentHint: readOnly || spec.meta?.deterministic === true,
    openWorldHint: facts.network,
  };
  const o = spec.meta?.annotations;
  if (!o || typeof o !== 'object') return derived;
  // Each override counts only in the less safe direction.
  const out: ToolAnnotations = {
    readOnlyHint: derived.readOnlyHint && o.readOnlyHint !== false,
    destructiveHint: derived.destructiveHint || o.destructiveHint === true,
    idempotentHint: derived.idempotentHint && o.idempotentHint !== false,
    openWorldHint: derived.openWorldHint || o.openWorldHint === true,
  };
  // A tool that says it writes is not read-only, and then forge cannot know it destroys nothing.
  if (!out.readOnlyHint && derived.readOnlyHint) out.destructiveHint = o.destructiveHint !== false;
  if (typeof o.title === 'string' && o.title !== '') return { title: o.title, ...out };
  return out;
}

const scanned = new WeakMap<object, { ro: boolean; rw: boolean }>();

/**
 * Whether `schema` annotates any value with `x-bind: "ro"` / `"rw"`, anywhere in it (a branch the
 * input may never take counts too: the answer errs toward "may write").
 */
export function bindModes(schema: unknown): { ro: boolean; rw: boolean } {
  if (schema === null || typeof schema !== 'object') return { ro: false, rw: false };
  const known = scanned.get(schema);
  if (known) return known;
  const found = { ro: false, rw: false };
  const stack: [unknown, number][] = [[schema, 0]];
  let visited = 0;
  while (stack.length > 0) {
    const [v, depth] = stack.pop() as [unknown, number];
    if (v === null || typeof v !== 'object') continue;
    // Past the bounds: assume the worst rather than stop looking and claim read-only.
    if (depth > 64 || ++visited > 100_000) {
      found.rw = true;
      break;
    }
    if (!Array.isArray(v)) {
      const bind = (v as Record<string, unknown>)['x-bind'];
      if (bind === 'rw') found.rw = true;
      else if (bind !== undefined) found.ro = true;
    }
    for (const x of Object.values(v)) if (x !== null && typeof x === 'object') stack.push([x, depth + 1]);
  }
  scanned.set(schema, found);
  return found;
}
