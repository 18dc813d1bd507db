/**
 * The registry's writes of one scope: create (forge), remove, a state stamp and recover. Each
 * decides under the store's lock of the name, then puts what it wrote in memory (promote, which
 * writes across scopes, is in promote.ts).
 */
import type { RegistryContext } from './context.js';
import type { CreateOptions, CreateResult, OwnerCheck, RecoverResult, RemoveResult, SetStateResult, WriteOk } from './contract.js';
import { badName, caseTaken, damagedFailure, damagedOf, nameForbidden, unknownTool } from './failures.js';
import { validationFailure } from './json-schema.js';
import { type LoadContext, refreshName } from './loading.js';
import { toolNameProblem } from './name.js';
import { type SpecOk, validateSpec } from './spec.js';
import type { Collisions, Decision, ReadResult, ToolStore, ToolVersion } from './toolStore.js';
import { type CreatedBy, type Failure, type Scope, type StoredTool, TOOL_STATES, type ToolState, type ValidationFailure } from './types.js';

/** A spec with this registry's stamps: `version`, `digest`, `created_at`, `created_by`, `scope`, `state: "active"`. */
export function stamp(now: () => Date, spec: object, digest: string, version: number, scope: Scope, createdBy: CreatedBy): StoredTool {
  return {
    ...(spec as StoredTool),
    version,
    digest,
    created_at: now().toISOString(),
    created_by: { persona: createdBy.persona, session: createdBy.session },
    scope,
    state: 'active',
  };
}

/** See `Registry.validate`. */
export function validateTool(
  ctx: Pick<RegistryContext, 'runtimes' | 'builtins'>,
  spec: unknown,
): SpecOk | ValidationFailure | Failure<'name_forbidden'> {
  const r = validateSpec(spec, { runtimes: ctx.runtimes() });
  if (r.ok && ctx.builtins.has(r.spec.name)) return nameForbidden(r.spec.name);
  return r;
}

/** See `Registry.create`. */
export async function createTool(
  ctx: Pick<RegistryContext, 'stores' | 'memory' | 'claims' | 'builtins' | 'runtimes' | 'now'>,
  spec: unknown,
  opts: CreateOptions,
): Promise<CreateResult> {
  const store = ctx.stores.of(opts.scope);
  // Work on a JSON copy: what is validated, digested, kept in memory and written is the same
  // data, and a caller that later mutates its object changes nothing here.
  let copy: unknown;
  try {
    copy = JSON.parse(JSON.stringify(spec));
  } catch (err) {
    return validationFailure([{ path: '', message: `must be plain JSON data (${(err as Error).message})` }]);
  }
  const v = validateTool(ctx, copy);
  if (!v.ok) return v;
  const name = v.spec.name;
  const result = await ctx.claims.claimed(name, opts.scope, (claim) =>
    store
      .put<CreateResult>(name, async (current, next, collisions): Promise<Decision<CreateResult>> => {
        const refused = await refuseCreate(ctx, store, name, opts, current, collisions);
        if (refused) return { value: refused };
        const tool = stamp(ctx.now, v.spec, v.digest, next, opts.scope, opts.createdBy);
        const previous = current.status === 'ok' ? { version: current.tool.version, digest: current.tool.digest } : undefined;
        claim();
        return { write: tool, value: previous ? { ok: true, tool, previous } : { ok: true, tool } };
      })
      .then((r) => {
        if (r.ok) ctx.memory.setOwn(opts.scope, name, r.tool);
        return r;
      }),
  );
  return result;
}

/** Why a create of `name` may not write over `current` (asked under the name's lock), or undefined. */
async function refuseCreate(
  ctx: Pick<RegistryContext, 'memory' | 'claims'>,
  store: ToolStore,
  name: string,
  opts: CreateOptions,
  current: ReadResult,
  collisions: () => Promise<Collisions>,
): Promise<Failure<string> | undefined> {
  // Only the very name, replaced on purpose, may stand beside a case variant or a wire
  // twin (one that existed before names were compared this way).
  if (current.status === 'missing' || !opts.overwrite) {
    const onDisk = (await collisions()).cases[0];
    if (onDisk !== undefined) return caseTaken(name, onDisk, opts.scope);
    const seen = ctx.memory.caseVariant(name);
    if (seen) return caseTaken(name, seen.tool.name, seen.scope);
    const clash = await ctx.claims.wireClash(name, store, collisions, 'name_taken');
    if (clash) return clash;
  }
  if (current.status !== 'missing' && !opts.overwrite) {
    const what = current.status === 'ok' ? `version ${current.tool.version}` : `a damaged record: ${current.failure.reason}`;
    return {
      ok: false,
      kind: 'name_taken',
      message: `tool "${name}" already exists in the ${opts.scope} scope (${what}); choose another name or pass overwrite to replace it`,
    };
  }
  if (current.status !== 'missing' && opts.authorize) return opts.authorize(current.status === 'ok' ? current.tool : undefined);
  return undefined;
}

/** See `Registry.remove`. */
export async function removeTool(ctx: LoadContext, name: string, opts: { scope: Scope; authorize?: OwnerCheck }): Promise<RemoveResult> {
  const store = ctx.stores.of(opts.scope);
  const invalid = badName(name);
  if (invalid) return invalid;
  const r = await store.remove(name, opts.authorize && ((current) => opts.authorize?.(current.status === 'ok' ? current.tool : undefined)));
  if (r.status === 'refused') {
    // Nothing was removed: memory keeps what the file holds.
    await refreshName(ctx, opts.scope, name);
    return r.failure;
  }
  ctx.memory.setOwn(opts.scope, name, undefined);
  if (r.status === 'missing') return unknownTool(name, `the ${opts.scope} scope`);
  // The damaged record was removed (and kept in the history like any).
  if (r.status === 'bad') return { ok: true, damaged: damagedOf(opts.scope, name, r.failure) };
  return { ok: true, removed: r.tool };
}

/** See `Registry.setState`. */
export async function setToolState(
  ctx: Pick<RegistryContext, 'stores' | 'memory' | 'now'>,
  name: string,
  toState: ToolState,
  opts: { scope: Scope; from?: readonly ToolState[]; digest?: string; authorize?: OwnerCheck },
): Promise<SetStateResult> {
  const store = ctx.stores.of(opts.scope);
  const invalid = badName(name);
  if (invalid) return invalid;
  if (!(TOOL_STATES as readonly string[]).includes(toState))
    return { ok: false, kind: 'validation_failed', message: `state "${toState}" is not one of ${TOOL_STATES.join(', ')}` };
  const result = await store
    .put<SetStateResult>(name, (current, next): Decision<SetStateResult> => {
      if (current.status === 'missing') return { value: unknownTool(name, `the ${opts.scope} scope`) };
      if (current.status === 'bad') return { value: damagedFailure(damagedOf(opts.scope, name, current.failure)) };
      const cur = current.tool;
      if (opts.from && !opts.from.includes(cur.state))
        return {
          value: {
            ok: false,
            kind: 'state_conflict',
            message: `tool "${name}" (${opts.scope} scope, version ${cur.version}) is ${cur.state}, not ${opts.from.join(' or ')}; nothing was changed`,
          },
        };
      if (opts.digest && cur.digest !== opts.digest)
        return {
          value: {
            ok: false,
            kind: 'state_conflict',
            message: `tool "${name}" (${opts.scope} scope) is now version ${cur.version} (${cur.digest}), not ${opts.digest}; nothing was changed`,
          },
        };
      const refused = opts.authorize?.(cur);
      if (refused) return { value: refused };
      // The content and its digest stay; the state is a stamp, and the change is a version of its own.
      const tool: StoredTool = { ...cur, version: next, created_at: ctx.now().toISOString(), state: toState };
      return { write: tool, value: { ok: true, tool, previous: { version: cur.version, digest: cur.digest } } };
    })
    .then((r) => {
      if (r.ok) ctx.memory.setOwn(opts.scope, name, r.tool);
      return r;
    });
  return result;
}

/** See `Registry.versions`. */
export async function toolVersions(ctx: Pick<RegistryContext, 'stores'>, name: string, opts: { scope: Scope }): Promise<ToolVersion[]> {
  const store = ctx.stores.of(opts.scope);
  return toolNameProblem(name) ? [] : store.versions(name);
}

/** See `Registry.recover`. */
export async function recoverTool(
  ctx: Pick<RegistryContext, 'stores' | 'memory' | 'claims' | 'builtins' | 'now'>,
  name: string,
  version: number,
  opts: { scope: Scope; createdBy?: CreatedBy },
): Promise<RecoverResult> {
  const store = ctx.stores.of(opts.scope);
  const invalid = badName(name);
  if (invalid) return invalid;
  const kept = (await store.versions(name)).find((v) => !v.current && v.version === version && v.tool);
  if (!kept?.tool) return unknownTool(name, `the version history of the ${opts.scope} scope at version ${version}`);
  const old = kept.tool;
  if (ctx.builtins.has(name)) return nameForbidden(name);
  const result = await ctx.claims.claimed(name, opts.scope, (claim) =>
    store
      .put<RecoverResult>(name, async (current: ReadResult, next, collisions): Promise<Decision<RecoverResult>> => {
        if (current.status === 'missing') {
          const clash = await ctx.claims.wireClash(name, store, collisions, 'name_taken');
          if (clash) return { value: clash as Failure<'name_taken'> };
        }
        // A recovered promoted tool keeps its origin: it still came from there.
        const tool = stamp(ctx.now, old, old.digest, next, opts.scope, opts.createdBy ?? old.created_by);
        const value: WriteOk = { ok: true, tool };
        if (current.status === 'ok') value.previous = { version: current.tool.version, digest: current.tool.digest };
        claim();
        return { write: tool, value };
      })
      .then((r) => {
        if (r.ok) ctx.memory.setOwn(opts.scope, name, r.tool);
        return r;
      }),
  );
  return result;
}
