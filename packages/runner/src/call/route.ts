import type { DispatchOptions, ForgeOptions } from '../api.js';
import { creatorOf } from '../caller.js';
import type { Setup, ToolLookup } from '../ports.js';
import type { Call } from './call.js';
import { type Resolved, type ResolvePorts, resolveTarget, targetEvent, targetName } from './resolve.js';

/**
 * How a call finds its tool (step 1), and where a forged tool's execute and record steps happen:
 * here, or (`dispatch`) on a worker through the job queue. The pipeline (pipeline.ts) is the
 * same on every route.
 */
export interface CallRoute {
  resolve(call: Call): Promise<Resolved>;
  dispatch?: DispatchOptions | undefined;
}

/**
 * A front-end's route: through its registries and sources (resolve.ts), with what
 * `onUnknownTool` adds to an `unknown_tool` message (the toolsmith's gap); forged tools run here
 * or, with `ForgeOptions.dispatch`, on a worker.
 */
export function frontEndRoute(e: ResolvePorts & Pick<Setup, 'options'>): CallRoute {
  return {
    async resolve(call) {
      const found = await resolveTarget(e, call.ctx, call.name);
      if (found.ok || found.kind !== 'unknown_tool') return found;
      const hint = unknownToolHint(e.options, call);
      return typeof hint === 'string' && hint !== '' ? { ...found, message: `${found.message}; ${hint}` } : found;
    },
    dispatch: e.options.dispatch,
  };
}

/**
 * A worker's route for a job (work.ts): the tool must be the forged tool of digest `pinned` that
 * the front-end resolved. A worker whose registry has not seen it yet (or not its latest version)
 * reads the stores again before it refuses; a tool that changed in between is refused
 * (`internal`, under the tool's name). It runs here: a worker never dispatches.
 */
export function pinnedRoute(e: ResolvePorts & Pick<ToolLookup, 'reloadTools'>, pinned: string): CallRoute {
  return {
    async resolve(call) {
      const asked = call.name;
      let found = await resolveTarget(e, call.ctx, asked);
      if (!(found.ok && found.target.kind === 'forged' && found.target.stored.digest === pinned)) {
        await e.reloadTools(call.ctx);
        found = await resolveTarget(e, call.ctx, asked);
      }
      if (!found.ok) return found;
      const target = found.target;
      const now = target.kind === 'forged' ? target.stored : undefined;
      if (now?.digest === pinned) return found;
      const name = targetName(target);
      const what = now ? `is now ${now.digest} (version ${now.version})` : 'is not a forged tool here';
      return {
        ok: false,
        kind: 'internal',
        message: `tool "${name}" changed between the front-end and this worker: the call was for ${pinned}, and the tool ${what}; call it again`,
        name,
        eventType: targetEvent(target),
      };
    },
  };
}

/** What `onUnknownTool` adds for the name `call` asked for (its exceptions are ignored). */
function unknownToolHint(options: ForgeOptions, call: Call): string | undefined {
  try {
    return options.onUnknownTool?.(call.name, creatorOf(call.caller));
  } catch {
    return undefined;
  }
}
