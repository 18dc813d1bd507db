import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Gateway } from '@forge/gateway';
import type { JobQueue } from '@forge/queue';
import { inertText } from '@forge/registry/inert';
import type { CallContext, Forge, ForgeOptions } from '@forge/runner';
import type { GapStore, ProposalStore, Toolsmith } from '@forge/toolsmith';
import { EnvironmentError } from './args.js';
import { openStore, type Store } from './store.js';
import { warmFromEnv } from './warm-env.js';
import type { Where } from './where.js';

/** The caller identity the runner takes from the environment (flags already applied). */
export function callContext(env: NodeJS.ProcessEnv): CallContext {
  const ctx: CallContext = {};
  if (env.FORGE_PERSONA) ctx.persona = env.FORGE_PERSONA;
  if (env.FORGE_SESSION_ID) ctx.session = env.FORGE_SESSION_ID;
  if (env.FORGE_TASK_ID) ctx.task = env.FORGE_TASK_ID;
  if (env.FORGE_ALLOWED_TOOLS !== undefined) ctx.allowedTools = env.FORGE_ALLOWED_TOOLS;
  return ctx;
}

/** An engine and its toolsmith, closed together (the toolsmith first). */
export interface Engine {
  forge: Forge;
  toolsmith: Toolsmith;
  /** The gateway serving gateway.json's upstream servers, when this engine has one (a server always does). */
  gateway?: Gateway;
  close(options?: { graceMs?: number }): Promise<void>;
}

/** An engine opened for a command that calls no tool: its toolsmith only when one was made. */
type LookingEngine = Omit<Engine, 'toolsmith'> & { toolsmith?: Toolsmith };

/**
 * Creates an engine with its toolsmith attached: an unknown tool name becomes a gap (and the
 * toolsmith's hint goes into the `unknown_tool` message). Opening writes nothing: the toolsmith
 * creates its directory with its first gap or proposal. Throws what `createForge` throws.
 */
export async function createEngine(
  o: Omit<ForgeOptions, 'onUnknownTool'>,
  stores: { gapStore?: GapStore; proposalStore?: ProposalStore } = {},
): Promise<Engine> {
  return (await makeEngine(o, stores, true)) as Engine;
}

async function makeEngine(
  o: Omit<ForgeOptions, 'onUnknownTool'>,
  stores: { gapStore?: GapStore; proposalStore?: ProposalStore },
  withToolsmith: boolean,
): Promise<LookingEngine> {
  if (!withToolsmith) {
    const { createForge } = await import('@forge/runner');
    const forge = await createForge(o);
    return { forge, close: (options) => forge.close(options) };
  }
  const [{ createForge }, { createToolsmith }] = await Promise.all([import('@forge/runner'), import('@forge/toolsmith')]);
  // The engine is made before the toolsmith that answers its unknown tools: nothing is called in between.
  let smith: Toolsmith | undefined;
  const forge = await createForge({ ...o, onUnknownTool: (name, ctx) => smith?.unknownTool(name, ctx) });
  // Over a database's stores the toolsmith is the same service; its type names the file stores only.
  smith = createToolsmith({ forge, ...stores, onWarning: (m) => process.stderr.write(`forge toolsmith: ${inertText(m)}\n`) }) as Toolsmith;
  const toolsmith = smith;
  return {
    forge,
    toolsmith,
    async close(options) {
      try {
        await toolsmith.close();
      } finally {
        await forge.close(options);
      }
    },
  };
}

/** How {@link openForge} opens the engine. */
export interface OpenOptions {
  server?: boolean;
  /** Watch the tool stores, so tools forged or removed by other processes are seen (default: `server`). */
  watch?: boolean;
  /** The command may call a tool (default true); see {@link withForge}. */
  calls?: boolean;
  dispatch?: JobQueue;
  store?: Store;
}

/**
 * Opens the engine for one command; a home or audit log that cannot be opened is an environment
 * error. A server watches the tool stores and keeps sandboxes built ahead for its next calls; a
 * one-shot command does neither (it would exit before either paid off). Over `store` (default:
 * the one this invocation names, opened here and closed with the engine); with `dispatch`, the
 * forged tools' calls go to workers through that queue.
 */
export async function openForge(w: Where, options: OpenOptions = {}): Promise<Engine> {
  return (await openEngine(w, options, options.calls ?? true)) as Engine;
}

/**
 * {@link openForge} with the toolsmith made only when `calls` (the command may call a tool, whose
 * unknown name becomes a gap) or when a gateway is configured (listing its tools starts
 * upstreams, and one that cannot start is a gap); otherwise the toolsmith is not even loaded.
 */
async function openEngine(w: Where, options: OpenOptions, calls: boolean): Promise<LookingEngine> {
  const server = options.server ?? false;
  const store = options.store ?? (await openStore(w));
  try {
    const sources = await gatewaySources(w, server);
    const { META_TOOLS } = await import('@forge/runner');
    const engine = await makeEngine(
      {
        home: w.home,
        project: w.project,
        env: w.env,
        watch: options.watch ?? server,
        prebuild: server,
        ...warmFromEnv(w.env),
        sources,
        ...store.forgeOptions(META_TOOLS),
        ...(options.dispatch ? { dispatch: { queue: options.dispatch } } : {}),
      },
      store.toolsmithStores?.() ?? {},
      calls || sources.length > 0,
    );
    const gateway = sources[0];
    if (options.store) return { ...engine, ...(gateway ? { gateway } : {}) };
    return {
      ...engine,
      ...(gateway ? { gateway } : {}),
      async close(o) {
        try {
          await engine.close(o);
        } finally {
          await store.close();
        }
      },
    };
  } catch (err) {
    if (!options.store) await store.close().catch(() => {});
    throw new EnvironmentError(`cannot open forge (home ${w.home}, project ${w.project}, store ${store.where}): ${(err as Error).message}`);
  }
}

/**
 * The gateway's upstream MCP servers as a tool source: always for a server (gateway.json is
 * hot-reloaded, so one written later is seen), for a one-shot command only when a gateway.json
 * exists (nothing else is loaded or started otherwise). No upstream starts before one of its
 * tools is listed or called.
 */
async function gatewaySources(w: Where, server: boolean): Promise<Gateway[]> {
  const userFile = join(w.home, 'gateway.json');
  const workspaceFile = join(w.project, '.forge', 'gateway.json');
  if (!server && !existsSync(userFile) && !existsSync(workspaceFile)) return [];
  const { createGateway } = await import('@forge/gateway');
  return [createGateway({ userFile, workspaceFile, gatewayDir: join(w.home, 'gateway') })];
}

/**
 * Runs `fn` with an engine and closes it afterwards, whatever happens. With `calls: false` (the
 * command calls no tool: list, show, forge, promote, remove) the toolsmith is made only when a
 * gateway is configured.
 */
export async function withForge<T>(w: Where, fn: (forge: Forge) => Promise<T>, options: { calls?: boolean } = {}): Promise<T> {
  const engine = await openEngine(w, {}, options.calls ?? true);
  try {
    return await fn(engine.forge);
  } finally {
    await engine.close();
  }
}

/** Runs `fn` with an engine's toolsmith (and the engine) and closes both afterwards, whatever happens. */
export async function withToolsmith<T>(w: Where, fn: (toolsmith: Toolsmith, forge: Forge) => Promise<T>): Promise<T> {
  const engine = await openForge(w);
  try {
    return await fn(engine.toolsmith, engine.forge);
  } finally {
    await engine.close();
  }
}
