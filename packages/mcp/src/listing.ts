/**
 * The tools one server's client sees: how they are listed, what the client last saw, and when it
 * hears `notifications/tools/list_changed`.
 */
import type { CallContext, Forge } from '@forge/runner';
import type { Server, Tool } from '@modelcontextprotocol/server';
import { APPROVE_TOOL_DEFINITION } from './approveTool.js';
import { isMetaTool, META_TOOL_DEFINITIONS } from './metaTools.js';
import { findView, sourcedView, type ToolRecord, type ToolView, toolView } from './schema.js';
import { TOOLSMITH_TOOL_DEFINITIONS, type ToolsmithListing, type ToolsmithSurface, toolsmithListing } from './toolsmithTools.js';

/**
 * The forged tools `ctx` sees, then the sources' tools, by wire name, and a signature of that set (it changes when a tool
 * comes, goes or changes, or the caller's network grant does).
 */
export async function listViews(forge: Forge, ctx: CallContext): Promise<{ views: Map<string, ToolView>; signature: string }> {
  const listed = await forge.listTools(ctx);
  const facts = forge.sandboxFacts(ctx);
  const views = new Map<string, ToolView>();
  let signature = facts.network ? 'net\n' : '';
  for (const l of listed) {
    // A tool whose wire name another one shares is not listed (forge_call reaches it by its forge name).
    if (isMetaTool(l.tool.name) || l.wireConflict !== undefined) continue;
    const view = toolView(l.tool as ToolRecord, facts);
    views.set(view.tool.name, view);
    signature += `${l.tool.name}\0${l.scope}\0${l.tool.digest}\0${l.tool.version}\n`;
  }
  // The sources' tools (the gateway's upstream tools): after the forged ones, never over one.
  for (const t of await forge.listSourced(ctx)) {
    const view = sourcedView(t);
    if (views.has(view.tool.name)) continue;
    views.set(view.tool.name, view);
    signature += `${t.name}\0${t.origin.kind}\0${t.digest}\n`;
  }
  return { views, signature };
}

/**
 * The tools of a tools/list answer: forge's meta-tools as the toolsmith shapes them, then `views`
 * (with their task support when the server runs tasks). `elicits`: the client can ask its user.
 */
export function toolsList(views: Map<string, ToolView>, smith: ToolsmithListing, server: { tasks: boolean; elicits: boolean }): Tool[] {
  const tools: Tool[] = [];
  for (const t of META_TOOL_DEFINITIONS) {
    if (t.name === 'forge_tool') {
      // Governed: forge_tool is refused, so it is not offered; proposing is (while enabled).
      if (!smith.hideForgeTool) tools.push(t);
      if (smith.propose) tools.push(...TOOLSMITH_TOOL_DEFINITIONS);
      // Approving in the client needs a human there to ask: only a client that can elicit is offered it.
      if (smith.approve && server.elicits) tools.push(APPROVE_TOOL_DEFINITION);
    } else tools.push(t);
  }
  for (const v of views.values()) {
    const support = v.record.meta?.task_support;
    // The 2026 Tool has no `execution` field (the SDK drops it): the support is in forge's _meta too.
    const forgeMeta = (v.tool._meta as { forge: Record<string, unknown> }).forge;
    tools.push(
      server.tasks && support && support !== 'forbidden'
        ? { ...v.tool, execution: { taskSupport: support }, _meta: { forge: { ...forgeMeta, task_support: support } } }
        : v.tool,
    );
  }
  return tools;
}

/** A listing kept across server instances (a 2026 HTTP request's instance lives for one request). */
export interface SharedViews {
  get(): Map<string, ToolView> | undefined;
  set(views: Map<string, ToolView>): void;
}

/** What a {@link ToolListing} needs of the server it belongs to. */
export interface ListingDeps {
  /** The server whose client hears list_changed and resource updates. */
  server: Server;
  /** The engine, once open. */
  ready(): Forge | Promise<Forge>;
  ctx: CallContext;
  /** The persona the toolsmith sees, and the toolsmith (its part of the listing). */
  persona: string;
  smith: ToolsmithSurface | undefined;
  /** The caller's listing kept across instances, when there is one. */
  shared: SharedViews | undefined;
  /** Whether this instance follows the Forge's changes itself (false: its entry publishes them). */
  watch: boolean;
  /** The resource URIs the client subscribed to (a tool spec's subscriber hears it updated). */
  subscribed(): ReadonlySet<string>;
}

/** How many list changes were sent and reported at one moment (see {@link ToolListing.announceOwnChange}). */
export interface ListingMark {
  sent: number;
  reported: number;
}

/**
 * One server's listing state: the tools its client sees, the last two listings, the signature
 * the client last saw, and the list-changed check under way. Bursts of changes coalesce: one
 * listing at a time, one more if changes came in meanwhile.
 */
export class ToolListing {
  readonly #deps: ListingDeps;
  /** The tools this client sees, by wire name (cleared when the Forge reports a change). */
  #visible: Map<string, ToolView> | undefined;
  /** The last two listings (never cleared): what a subscribed tool spec was, and is. */
  #latest: Map<string, ToolView> | undefined;
  #previous: Map<string, ToolView> | undefined;
  /** The signature of what the client last saw (a tools/list, or a list_changed it heard). */
  #seen: string | undefined;
  /** What the toolsmith added to or took from the listing last time it was computed. */
  #smith: ToolsmithListing;
  #checking: Promise<void> | undefined;
  /** A change came in while a check was under way: check once more. */
  #again = false;
  /** Notifications sent, and changes the Forge reported. */
  #sent = 0;
  #reported = 0;

  constructor(deps: ListingDeps) {
    this.#deps = deps;
    this.#smith = toolsmithListing(undefined, deps.persona);
  }

  /** The toolsmith's part of the latest listing. */
  get toolsmith(): ToolsmithListing {
    return this.#smith;
  }

  /** Lists the tools anew; the signature includes the toolsmith's part. */
  async refresh(): Promise<{ views: Map<string, ToolView>; signature: string }> {
    const { views, signature } = await listViews(await this.#deps.ready(), this.#deps.ctx);
    this.#visible = views;
    this.#previous = this.#latest;
    this.#latest = views;
    this.#deps.shared?.set(views);
    // The toolsmith's part of the listing is in the signature: turning it on or off, or a persona's
    // mode changing, is list_changed like a tool coming or going.
    this.#smith = toolsmithListing(this.#deps.smith, this.#deps.persona);
    return { views, signature: this.#smith.key + signature };
  }

  /** Lists the tools for a tools/list answer: what the client sees from now on. */
  async listForClient(): Promise<Map<string, ToolView>> {
    const { views, signature } = await this.refresh();
    this.#seen = signature;
    return views;
  }

  /** The tools the client sees, listed anew only when none are known. */
  async views(): Promise<Map<string, ToolView>> {
    return this.#visible ?? (await this.refresh()).views;
  }

  /** The view of the tool `name` names, in either form (wire or forge name). */
  async viewOf(name: string): Promise<ToolView | undefined> {
    const known = this.#visible ?? this.#deps.shared?.get();
    return (known && findView(known, name)) ?? findView((await this.refresh()).views, name);
  }

  /** The Forge reported a change: what is known is stale; the client hears of it if what it sees changed. */
  toolsChanged(): void {
    this.#reported++;
    this.#visible = undefined;
    void this.checkChanged();
  }

  /** Lists anew and sends list_changed (and a subscribed spec's update) when the client's view changed. */
  checkChanged(): Promise<void> {
    if (this.#checking) {
      this.#again = true;
      return this.#checking;
    }
    this.#checking = this.#check()
      .catch((err) => process.emitWarning(`forge mcp: listing tools after a change failed: ${(err as Error).message}`))
      .finally(() => {
        this.#checking = undefined;
      });
    return this.#checking;
  }

  /** Waits for a check under way, so the client hears its list_changed before what comes next. */
  async settled(): Promise<void> {
    if (this.#checking) await this.#checking;
  }

  /**
   * The policy is not watched: a call is where a toolsmith switched on or off (or a mode changed)
   * is noticed, and the client then hears list_changed before it reads the answer.
   */
  async noticeToolsmith(): Promise<void> {
    const { smith, persona, watch } = this.#deps;
    if (!smith || !watch || this.#seen === undefined) return;
    if (toolsmithListing(smith, persona).key !== this.#smith.key) await this.checkChanged();
  }

  /** The counters now, to tell later whether a change came in and went unannounced. */
  mark(): ListingMark {
    return { sent: this.#sent, reported: this.#reported };
  }

  /**
   * After the client's own forge, promote or remove: it hears list_changed before the answer,
   * even when what it sees did not change (a promoted tool still shadowed by the project's), if
   * the Forge reported a change since `before` and none was sent.
   */
  async announceOwnChange(before: ListingMark): Promise<void> {
    if (this.#reported > before.reported && this.#sent === before.sent) await this.#notify();
  }

  async #check(): Promise<void> {
    do {
      this.#again = false;
      const { views, signature } = await this.refresh();
      const before = this.#previous;
      if (signature === this.#seen) continue;
      this.#seen = signature;
      await this.#notify();
      await this.#updateSubscribed(before, views);
    } while (this.#again);
  }

  /** A subscribed tool spec that changed (or went away) is reported updated. */
  async #updateSubscribed(before: Map<string, ToolView> | undefined, views: Map<string, ToolView>): Promise<void> {
    for (const uri of this.#deps.subscribed()) {
      if (!uri.startsWith('forge://tools/')) continue;
      const name = decodeURIComponent(uri.slice('forge://tools/'.length));
      const was = before && findView(before, name)?.record;
      const now = findView(views, name)?.record;
      if (was?.digest !== now?.digest || was?.version !== now?.version || was?.scope !== now?.scope)
        await this.#deps.server.sendResourceUpdated({ uri }).catch(() => {});
    }
  }

  async #notify(): Promise<void> {
    const { server } = this.#deps;
    // Only once the client is initialized (or spoke the 2026 era); a closed transport just drops it.
    if (!server.transport || (!server.getClientCapabilities() && server.getNegotiatedProtocolVersion() === undefined)) return;
    this.#sent++;
    await server.sendToolListChanged().catch(() => {});
    // The tool specs are resources too.
    await server.sendResourceListChanged().catch(() => {});
  }
}
