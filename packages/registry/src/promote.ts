import type { RegistryContext } from './context.js';
import type { PromoteOptions, PromoteOutcome, PromoteResult } from './contract.js';
import { badName, damagedFailure, damagedOf, unknownTool } from './failures.js';
import { reportFailure } from './loading.js';
import type { Collisions, Decision, ReadResult, ToolStore } from './toolStore.js';
import type { Failure, StoredTool } from './types.js';
import { stamp } from './writes.js';

/** What a promote uses. */
export type PromoteContext = Pick<RegistryContext, 'stores' | 'memory' | 'claims' | 'now' | 'onEvent' | 'projectDir'>;

/** See `Registry.promote`: copies a tool of `from` (default `project`) to the user scope. */
export async function promoteTool(ctx: PromoteContext, name: string, opts: PromoteOptions = {}): Promise<PromoteResult> {
  const from = opts.from ?? 'project';
  const user = ctx.stores.of('user');
  const invalid = badName(name);
  if (invalid) return invalid;
  const source = await ctx.stores.of(from).read(name);
  if (source.status === 'bad') {
    reportFailure(ctx.onEvent, from, source.failure);
    return damagedFailure(damagedOf(from, name, source.failure));
  }
  if (source.status !== 'ok') return unknownTool(name, `the ${from} scope`);
  const src = source.tool;
  const mayPromote = opts.authorize?.(src);
  if (mayPromote) return mayPromote;
  const project = ctx.projectDir ?? ctx.stores.of(from).where;
  const result = await ctx.claims.claimed(name, 'user', (claim) =>
    user
      .put<PromoteResult>(name, async (current, next, collisions): Promise<Decision<PromoteResult>> => {
        const decided = await promoteOutcome(ctx, user, { name, src, project, opts }, current, collisions);
        if (typeof decided !== 'string') return { value: decided };
        const tool: StoredTool = {
          ...stamp(ctx.now, src, src.digest, next, 'user', opts.createdBy ?? src.created_by),
          origin: { project, digest: src.digest },
        };
        const value: PromoteResult = { ok: true, outcome: decided, tool };
        if (current.status === 'ok') value.previous = { version: current.tool.version, digest: current.tool.digest };
        claim();
        return { write: tool, value };
      })
      .then((r) => {
        if (r.ok) ctx.memory.setOwn('user', name, r.tool);
        return r;
      }),
  );
  return result;
}

/** The promote being decided: the name, its source tool, the project it is promoted from, the caller's options. */
interface Promotion {
  name: string;
  src: StoredTool;
  project: string;
  opts: PromoteOptions;
}

/**
 * Asked under the user scope's lock of the name: the outcome of writing the promoted tool over
 * `current`, or what to return instead (`unchanged` without a write, or a refusal).
 */
async function promoteOutcome(
  ctx: Pick<RegistryContext, 'claims'>,
  user: ToolStore,
  { name, src, project, opts }: Promotion,
  current: ReadResult,
  collisions: () => Promise<Collisions>,
): Promise<PromoteOutcome | PromoteResult> {
  let outcome: PromoteOutcome = 'created';
  if (current.status === 'missing') {
    const variant = (await collisions()).cases[0];
    if (variant !== undefined) {
      return conflict(
        `the user scope already has "${variant}", which differs from "${name}" only by case, and names are compared regardless of case; rename the tool before promoting it`,
      );
    }
    const clash = await ctx.claims.wireClash(name, user, collisions, 'promote_conflict');
    if (clash) return clash;
  }
  if (current.status === 'ok') {
    const cur = current.tool;
    if (cur.digest === src.digest) return { ok: true, outcome: 'unchanged', tool: cur };
    if (cur.origin?.project === project) outcome = 'updated';
    else if (opts.force) outcome = 'replaced';
    else {
      const whence = cur.origin ? `promoted from ${cur.origin.project}` : 'forged in the user scope';
      return conflict(
        `the user scope already has a different "${name}" (version ${cur.version}, ${cur.digest}, ${whence}); rename the tool or pass force to replace it (the old version stays recoverable)`,
      );
    }
  } else if (current.status === 'bad') {
    if (!opts.force) {
      return conflict(
        `the user scope holds an unreadable file for "${name}" (${current.failure.reason}); pass force to replace it (it is kept in the version history)`,
      );
    }
    outcome = 'replaced';
  }
  if (current.status !== 'missing' && opts.authorize) {
    const refused = opts.authorize(current.status === 'ok' ? current.tool : undefined);
    if (refused) return refused;
  }
  return outcome;
}

function conflict(message: string): Failure<'promote_conflict'> {
  return { ok: false, kind: 'promote_conflict', message };
}
