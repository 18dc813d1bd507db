import type { SourceContext, SourcedTool, SourceHost, SourceJob, SourceResult } from '@forge/runner';
import type { Resolver } from '@forge/sandbox';
import { createGatewayConfig, type GatewayConfigSource } from './config.js';
import { Connections } from './connections.js';
import { serverDefinition } from './definition.js';
import { type LastAudited, noPins, openPinStore, type PinStore, type Pins, type RecordAudit, toolDigest } from './pins.js';
import { expectedDigests } from './review.js';
import { isForgeToolName, wireClash, wireKeyOf } from './tool-names.js';
import type { ApprovalVia, Gateway, GatewayConfig, ServerConfig, ServerReport, ToolDefinition, ToolDiff, ToolState } from './types.js';
import type { Upstream } from './upstream.js';
import { localReference, vettedAnnotations } from './upstream-answers.js';

/** Options of {@link createGateway}. */
export interface GatewayOptions {
  /** The operator's gateway.json (`$FORGE_HOME/gateway.json`). */
  userFile?: string;
  /** The project's (`<project>/.forge/gateway.json`). */
  workspaceFile?: string;
  /** Where the pins live (forge's state, e.g. `$FORGE_HOME/gateway`). */
  gatewayDir: string;
  /** Use this bwrap for sandboxed upstreams (default: the one on PATH). */
  bwrapPath?: string;
  /** Resolves names for the upstreams' egress proxy (tests map names to loopback). */
  resolver?: Resolver;
  /** Where a project-level server's binds may point (default: the attached engine's policy `bind_roots`, read at each start). */
  bindRoots?: readonly string[];
  /** Paths no upstream may see besides the sandbox's deny list (default: the host's forge home once attached). */
  forgeState?: readonly string[];
  /**
   * Where audit entries go before `attach`, or without a runner (the CLI): pins are written only
   * when an entry can be recorded, and trusted only when they match the last one recorded.
   */
  record?: RecordAudit;
  lastAudited?: LastAudited;
  now?: () => number;
  /**
   * How long a listing waits for a server that is still starting (default 3000 ms). Past it the
   * server's approved tools are offered as pinned, every call still checks the live definition,
   * and the listeners hear once the server has listed: one slow upstream never holds up the list.
   */
  listWaitMs?: number;
}

type Refusal = { ok: false; kind: string; message: string };
type Listing = { ok: true; tools: ToolDefinition[]; upstream: Upstream } | Refusal;

/** How long a listing waits for a server still starting before it offers the server's pins. */
const LIST_WAIT_MS = 3000;

/**
 * Creates the gateway: external MCP servers declared in gateway.json, each tool projected as
 * `<server>.<tool>` once an operator approved (pinned) its definition, served to the runner as a
 * `ToolSource`. Upstreams start on first need and stop at `close()`.
 */
export function createGateway(options: GatewayOptions): Gateway {
  return new GatewaySource(options);
}

class GatewaySource implements Gateway {
  readonly kind = 'gateway';
  readonly #options: GatewayOptions;
  readonly #config: GatewayConfigSource;
  readonly #pinStore: PinStore;
  #host: SourceHost | undefined;
  #pending: [string, Record<string, unknown>][] = [];
  readonly #connections: Connections;
  readonly #listeners = new Set<(names: string[]) => void>();
  readonly #projections = new WeakMap<readonly ToolDefinition[], { key: string; tools: SourcedTool[] }>();
  /** Facts already recorded once (skipped names, changed digests). */
  readonly #noted = new Set<string>();
  #closed = false;

  constructor(options: GatewayOptions) {
    this.#options = options;
    this.#config = createGatewayConfig({
      ...(options.userFile ? { userFile: options.userFile } : {}),
      ...(options.workspaceFile ? { workspaceFile: options.workspaceFile } : {}),
      onEvent: ({ type, ...data }) => this.#record(type, data as Record<string, unknown>),
    });
    this.#pinStore = openPinStore({
      dir: options.gatewayDir,
      record: (type, data) => this.#recordDurably(type, data),
      lastAudited: async (type) => {
        if (this.#host) return this.#host.lastAudited(type);
        return this.#options.lastAudited?.(type);
      },
    });
    this.#connections = new Connections(options, {
      host: () => this.#host,
      record: (type, data) => this.#record(type, data),
      // A failure here must never become an unhandled rejection (it would stop the server).
      onToolsChanged: (u) =>
        void this.#toolsChanged(u).catch((err: unknown) =>
          process.emitWarning(`forge gateway: re-checking ${u.server.name}'s tools after list_changed failed: ${(err as Error).message}`),
        ),
    });
  }

  /** Fire and forget: facts for the log (what cannot be written is the runner's to report). */
  #record(type: string, data: Record<string, unknown>): void {
    const warn = (err: unknown) => process.emitWarning(`forge gateway: recording ${type} failed: ${(err as Error).message}`);
    if (this.#host) void this.#host.record(type, data).catch(warn);
    else if (this.#options.record) void this.#options.record(type, data).catch(warn);
    else if (this.#pending.length < 1000) this.#pending.push([type, data]);
  }

  async #recordDurably(type: string, data: Record<string, unknown>): Promise<{ message: string } | undefined> {
    if (this.#host) return this.#host.record(type, data);
    if (this.#options.record) return this.#options.record(type, data);
    return { message: 'the gateway has no audit log (attach it to a forge, or pass record)' };
  }

  /** The trusted pins, or undefined (nothing is served) when they cannot be trusted; recorded once per reason. */
  async #pins(): Promise<Pins | undefined> {
    const read = await this.#pinStore.read();
    if (read.ok) return read.pins;
    this.#once(`pins\0${read.kind}\0${read.message}`, 'gateway.pins_refused', { kind: read.kind, message: read.message });
    return undefined;
  }

  attach(host: SourceHost): void {
    this.#host = host;
    for (const [type, data] of this.#pending.splice(0)) void host.record(type, data);
  }

  owns(name: string): string | undefined {
    const lower = name.toLowerCase();
    for (const server of this.#servers()) {
      const ns = server.name.toLowerCase();
      if (lower.startsWith(`${ns}.`) || lower.startsWith(`${ns}__`)) {
        return `"${name}" is in the namespace of the gateway server "${server.name}" (${server.file}): its tools are served as ${server.name}.<tool>, so a forged tool may not take such a name; forge it under another namespace`;
      }
    }
    return undefined;
  }

  config(): { ok: true; config: GatewayConfig } | Refusal {
    const state = this.#config.current();
    return state.ok ? state : { ok: false, kind: state.kind, message: state.message };
  }

  #servers(): ServerConfig[] {
    const c = this.config();
    return c.ok ? [...c.config.servers.values()] : [];
  }

  #server(name: string): ServerConfig | Refusal {
    const c = this.config();
    if (!c.ok) return c;
    const s = c.config.servers.get(name);
    if (s) return s;
    const known = [...c.config.servers.keys()];
    return {
      ok: false,
      kind: 'unknown_server',
      message: `no gateway server "${name}" is configured${known.length ? ` (configured: ${known.join(', ')})` : ''}; add it to gateway.json`,
    };
  }

  /** What the upstream lists now (cached per connection), its skipped names recorded once. */
  async #listing(server: ServerConfig): Promise<Listing> {
    const up = this.#connections.lister(server);
    const listed = await up.list();
    if (!listed.ok) return listed;
    this.#noteSkipped(up);
    return { ok: true, tools: listed.tools, upstream: up };
  }

  #noteSkipped(up: Upstream): void {
    for (const [tool, why] of up.skipped)
      this.#once(`skip\0${up.server.name}\0${tool}`, 'gateway.tool_skipped', { server: up.server.name, tool, why });
    for (const t of up.tools ?? []) {
      if (!isForgeToolName(`${up.server.name}.${t.name}`)) {
        this.#once(`skip\0${up.server.name}\0${t.name}`, 'gateway.tool_skipped', {
          server: up.server.name,
          tool: t.name,
          why: 'its name does not fit the forge tool-name grammar ([A-Za-z0-9_.-], at most 64 bytes with the server name)',
        });
      }
    }
  }

  #once(key: string, type: string, data: Record<string, unknown>): void {
    if (this.#noted.has(key)) return;
    this.#noted.add(key);
    this.#record(type, data);
  }

  /** Records `gateway.tool_changed` once per new definition of each pinned tool; returns the changed names. */
  #checkPins(pins: Pins, server: ServerConfig, tools: readonly ToolDefinition[]): string[] {
    const changed: string[] = [];
    for (const state of pins.states(server.name, tools)) {
      if (state.status !== 'changed' && state.status !== 'removed') continue;
      changed.push(state.name);
      this.#once(`changed\0${state.name}\0${state.digest ?? 'removed'}`, 'gateway.tool_changed', {
        server: server.name,
        tool: state.tool,
        status: state.status,
        old_digest: state.pinned ?? null,
        new_digest: state.digest ?? null,
      });
    }
    return changed;
  }

  async #toolsChanged(up: Upstream): Promise<void> {
    if (!up.tools) return;
    this.#noteSkipped(up);
    const pins = await this.#pins();
    const names = new Set<string>();
    if (pins) for (const n of this.#checkPins(pins, up.server, up.tools)) names.add(n);
    for (const t of up.tools) names.add(`${up.server.name}.${t.name}`);
    this.#fire([...names]);
  }

  #fire(names: string[]): void {
    for (const l of this.#listeners) {
      try {
        l(names);
      } catch {
        // a listener's failure is its own
      }
    }
  }

  #projected(server: ServerConfig, up: Upstream, state: ToolState): SourcedTool | undefined {
    const def = state.definition;
    if (state.status !== 'approved' || !def || !state.digest) return undefined;
    if (!isForgeToolName(state.name)) return undefined;
    const secrets = Object.values(server.secrets);
    const tool: SourcedTool = {
      name: state.name,
      description: def.description ?? def.title ?? '',
      input_schema: def.inputSchema,
      digest: state.digest,
      origin: { kind: 'gateway', server: server.name, tool: def.name, sandboxed: up.sandboxed, transport: server.transport },
    };
    if (def.outputSchema) tool.output_schema = def.outputSchema;
    const annotations = vettedAnnotations(server, def.annotations);
    if (annotations) tool.annotations = annotations;
    if (secrets.length > 0 || server.timeout_ms !== undefined) {
      tool.meta = {
        ...(secrets.length > 0 ? { secrets } : {}),
        ...(server.timeout_ms !== undefined ? { timeout_ms: server.timeout_ms } : {}),
      };
    }
    return tool;
  }

  /**
   * Whether the server's definition now is the one approved for the file declaring it; when not,
   * its tools are withheld, and that is recorded once per definition (`gateway.server_changed`).
   */
  #definitionApproved(pins: Pins, server: ServerConfig): boolean {
    const now = serverDefinition(server);
    const approved = pins.definition(server.name, now.file);
    if (approved?.digest === now.digest) return true;
    this.#once(`definition\0${server.name}\0${now.file}\0${now.digest}`, 'gateway.server_changed', {
      server: server.name,
      file: now.file,
      from: server.from,
      approved: approved?.digest ?? null,
      now: now.digest,
      why: approved
        ? 'its definition (command, arguments, environment, binds, network, executable or script) changed since it was approved'
        : `no approval covers its definition in ${now.file}`,
    });
    return false;
  }

  async #serverTools(pins: Pins, server: ServerConfig, offline = false): Promise<SourcedTool[]> {
    const pinned = pins.list(server.name);
    if (pinned.size === 0) return [];
    if (!this.#definitionApproved(pins, server)) return [];
    const listing = offline ? undefined : await this.#boundedListing(server);
    if (listing?.ok) {
      // One projection per listing, pins and config: a listing is a new array after every re-list.
      const key = `${pins.digest}\0${pins.generation}\0${JSON.stringify(server)}\0${listing.upstream.sandboxed}`;
      const cached = this.#projections.get(listing.tools);
      if (cached?.key === key) return cached.tools;
      this.#checkPins(pins, server, listing.tools);
      const tools = pins
        .states(server.name, listing.tools, server.tools)
        .map((s) => this.#projected(server, listing.upstream, s))
        .filter((t): t is SourcedTool => t !== undefined);
      this.#projections.set(listing.tools, { key, tools });
      return tools;
    }
    // Offline (a command that only looks), or the upstream cannot be listed without the secrets of
    // a call (or is down): offer the approved definitions; every call checks the live definition
    // against the pin before it is sent. (A lister is a handle: making one starts nothing.)
    const up = this.#connections.lister(server);
    return pins
      .states(
        server.name,
        [...pinned.values()].map((p) => p.definition),
        server.tools,
      )
      .map((s) => this.#projected(server, up, s))
      .filter((t): t is SourcedTool => t !== undefined);
  }

  /**
   * The server's listing, or undefined when it is not ready within `listWaitMs`: then, once it is,
   * the listeners hear of the server's tools (a client lists again and sees them as listed).
   */
  async #boundedListing(server: ServerConfig): Promise<Listing | undefined> {
    const pending = this.#listing(server);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<undefined>((resolve) => {
      timer = setTimeout(resolve, this.#options.listWaitMs ?? LIST_WAIT_MS, undefined);
      timer.unref();
    });
    const first = await Promise.race([pending, late]);
    clearTimeout(timer);
    if (first !== undefined) return first;
    void pending
      .then((l) => {
        if (l.ok && !this.#closed) this.#fire(l.tools.map((t) => `${server.name}.${t.name}`));
      })
      .catch(() => {});
    return undefined;
  }

  async list(ctx: SourceContext): Promise<readonly SourcedTool[]> {
    if (this.#closed) return [];
    const pins = await this.#pins();
    if (!pins) return [];
    const all = await Promise.all(this.#servers().map((s) => this.#serverTools(pins, s, ctx.offline === true)));
    return all.flat();
  }

  async resolve(name: string, _ctx: SourceContext): Promise<SourcedTool | undefined> {
    const dot = name.indexOf('.');
    if (dot <= 0 || this.#closed) return undefined;
    const server = this.#server(name.slice(0, dot));
    if ('ok' in server) return undefined;
    const pins = await this.#pins();
    if (!pins) return undefined;
    return (await this.#serverTools(pins, server)).find((t) => t.name === name);
  }

  async execute(job: SourceJob): Promise<SourceResult> {
    const started = performance.now();
    const origin = job.tool.origin;
    const server = this.#server(origin.server);
    if ('ok' in server) return { ...server, outcome: 'none' };
    const up = this.#connections.get(server, job.secrets, job.authority);
    const facts = (): Record<string, unknown> => ({
      server: server.name,
      tool: origin.tool,
      protocol_version: up.protocolVersion,
      transport: server.transport,
      sandboxed: up.sandboxed,
      ...(server.transport === 'http' ? { url: server.url } : up.pid !== undefined ? { upstream_pid: up.pid } : {}),
      restarts: up.restarts,
      duration_ms: Math.round((performance.now() - started) * 1000) / 1000,
    });
    // The server as declared now must be the one approved, and so must the tool's definition.
    const pinsNow = await this.#pins();
    if (!pinsNow || !this.#definitionApproved(pinsNow, server)) {
      this.#fire([job.tool.name]);
      return {
        ok: false,
        kind: 'tool_changed',
        message: `gateway server "${server.name}" (${server.file}) is not the one approved: its definition changed or was never approved there; its tools are withheld until approved again (forge gateway approve ${server.name})`,
        outcome: 'none',
        facts: facts(),
      };
    }
    // The definition this connection serves now must be the one approved: never call a changed tool.
    const listed = await up.list();
    if (!listed.ok) return { ...listed, facts: facts() };
    const def = listed.tools.find((t) => t.name === origin.tool);
    if (!def || up.digestOf(def, toolDigest) !== job.tool.digest) {
      const pins = await this.#pins();
      if (pins) this.#checkPins(pins, server, listed.tools);
      this.#fire([job.tool.name]);
      return {
        ok: false,
        kind: 'tool_changed',
        message: `gateway tool "${job.tool.name}" ${def ? 'changed' : 'is no longer listed'} at the upstream since it was approved; it is withheld until approved again (forge gateway diff ${server.name})`,
        outcome: 'none',
        facts: facts(),
      };
    }
    const res = await up.call(origin.tool, job.input, { signal: job.signal, timeoutMs: job.timeoutMs, onEvent: job.onEvent });
    if (!res.ok) return { ...res, facts: facts() };
    const content = Array.isArray(res.result.content) ? res.result.content : [];
    const local = localReference(content);
    if (local) {
      return {
        ok: false,
        kind: 'output_invalid',
        message: `gateway tool "${job.tool.name}" answered with ${local}; forge passes on links and embedded resources only to http(s) addresses, never to the host's files or forge's own resources, so the answer was withheld`,
        outcome: 'failure',
        facts: facts(),
      };
    }
    if (res.result.isError) {
      const message = content
        .filter((c): c is { type: 'text'; text: string } => (c as { type?: unknown }).type === 'text')
        .map((c) => c.text)
        .join('\n');
      return {
        ok: false,
        kind: 'upstream_error',
        message: message || `gateway tool "${job.tool.name}" answered with an error`,
        outcome: 'success',
        content,
        facts: facts(),
      };
    }
    return { ok: true, data: res.result.structuredContent ?? { content }, content, facts: facts() };
  }

  onChange(listener: (names: string[]) => void): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  async servers(options: { probe?: boolean } = {}): Promise<ServerReport[]> {
    const pins = await this.#pins();
    const now = (this.#options.now ?? Date.now)();
    const out: ServerReport[] = [];
    for (const server of this.#servers()) {
      const listing = options.probe ? await this.#listing(server) : undefined;
      const ups = this.#connections.of(server.name);
      const up = ups.find((u) => u.state === 'running') ?? ups[0];
      const states = listing?.ok && pins ? pins.states(server.name, listing.tools, server.tools) : [];
      const report: ServerReport = {
        name: server.name,
        transport: server.transport,
        sandboxed: server.transport === 'stdio' && !server.unsandboxed,
        from: server.from,
        state: !up
          ? 'stopped'
          : up.breakerUntil > now
            ? 'breaker_open'
            : up.state === 'running'
              ? 'running'
              : up.state === 'failed'
                ? 'failed'
                : 'stopped',
        tools:
          listing?.ok && pins
            ? {
                approved: states.filter((s) => s.status === 'approved').length,
                withheld: states.filter((s) => s.status === 'new' || s.status === 'changed').length,
              }
            : { approved: pinnedCount(pins, server) },
        definition: serverDefinition(server).digest,
        restarts: ups.reduce((n, u) => n + u.restarts, 0),
      };
      if (up?.protocolVersion) report.protocolVersion = up.protocolVersion;
      if (up?.serverInfo) report.serverInfo = up.serverInfo;
      const error = listing && !listing.ok ? listing.message : up?.lastError;
      if (error) report.error = error;
      out.push(report);
    }
    return out;
  }

  /**
   * The server's listing and the trusted pins, or why not. `untrusted: 'none'` (an approval) reads
   * a pins.json that cannot be trusted as holding no pin: the approval sets that file aside and
   * starts a new one, which is the way out the refusal names.
   */
  async #both(
    name: string,
    o: { untrusted?: 'none' } = {},
  ): Promise<{ ok: true; server: ServerConfig; tools: ToolDefinition[]; pins: Pins } | Refusal> {
    const server = this.#server(name);
    if ('ok' in server) return server;
    const listing = await this.#listing(server);
    if (!listing.ok) return listing;
    const pins = await this.#pinStore.read();
    if (!pins.ok && !(o.untrusted === 'none' && pins.kind === 'pins_untrusted')) return pins;
    return { ok: true, server, tools: listing.tools, pins: pins.ok ? pins.pins : noPins() };
  }

  async tools(name: string): Promise<ToolState[] | Refusal> {
    const b = await this.#both(name);
    if (!b.ok) return b;
    this.#checkPins(b.pins, b.server, b.tools);
    return b.pins.states(b.server.name, b.tools, b.server.tools);
  }

  async approve(
    name: string,
    tools: string[],
    by: string,
    options: { expect?: Readonly<Record<string, string>>; definition?: string; via?: ApprovalVia } = {},
  ): Promise<{ ok: true; approved: ToolState[] } | Refusal> {
    const b = await this.#both(name, { untrusted: 'none' });
    if (!b.ok) return b;
    const allowed = (t: string) => (!b.server.tools || b.server.tools.includes(t)) && isForgeToolName(`${name}.${t}`);
    let defs: ToolDefinition[];
    if (tools.length === 0) defs = b.tools.filter((d) => allowed(d.name));
    else {
      defs = [];
      for (const t of tools) {
        const def = b.tools.find((d) => d.name === t);
        if (!def) {
          return {
            ok: false,
            kind: 'unknown_tool',
            message: `gateway server "${name}" does not list a tool "${t}" (it lists: ${b.tools.map((d) => d.name).join(', ') || 'nothing'})`,
          };
        }
        if (!allowed(t)) {
          return {
            ok: false,
            kind: 'not_allowed',
            message: `gateway tool "${name}.${t}" cannot be approved: ${isForgeToolName(`${name}.${t}`) ? `the server's "tools" allow-list in ${b.server.file} omits it` : 'its name does not fit the forge tool-name grammar'}`,
          };
        }
        defs.push(def);
      }
    }
    // What the approver reviewed is what is pinned: a definition that changed since is refused.
    const stale = expectedDigests(name, defs, options.expect);
    if (stale) return stale;
    const pinned = b.pins.servers().flatMap((server) => [...b.pins.list(server).keys()].map((t) => `${server}.${t}`));
    const clash = wireClash(
      pinned,
      defs.map((d) => `${name}.${d.name}`),
    );
    if (clash) {
      return {
        ok: false,
        kind: 'name_taken',
        message: `gateway tool "${clash.name}" cannot be approved: on the wire it is "${wireKeyOf(clash.name)}", the name of the approved "${clash.holder}" already; rename one of the servers in gateway.json`,
      };
    }
    // The approval covers the server's whole definition as declared now, by the file declaring it
    // (and, when the approver names the one reviewed, only that one).
    const definition = serverDefinition(b.server);
    if (options.definition !== undefined && options.definition !== definition.digest)
      return {
        ok: false,
        kind: 'state_conflict',
        message: `gateway server "${name}" is declared otherwise than when it was reviewed (${options.definition.slice(0, 19)}…, now ${definition.digest.slice(0, 19)}… in ${definition.file}); nothing was pinned: review it again, then approve`,
      };
    const res = await this.#pinStore.approve(name, defs, by, { file: definition.file, digest: definition.digest }, options.via);
    if (!res.ok) return res;
    this.#fire(b.tools.map((d) => `${name}.${d.name}`));
    return { ok: true, approved: res.tools };
  }

  async diff(name: string): Promise<ToolDiff[] | Refusal> {
    const b = await this.#both(name);
    if (!b.ok) return b;
    return b.pins.diff(b.server.name, b.tools);
  }

  async unpin(
    name: string,
    tools: string[],
    by: string,
    options: { via?: ApprovalVia } = {},
  ): Promise<{ ok: true; removed: string[] } | Refusal> {
    const res = await this.#pinStore.unpin(name, tools, by, options.via);
    if (!res.ok) return res;
    const removed = res.tools.map((s) => s.tool);
    this.#fire(removed.map((t) => `${name}.${t}`));
    return { ok: true, removed };
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#connections.close();
  }
}

/** The tools pinned for `server` that its allow-list (if any) lets through: what it serves while it lists them unchanged. */
function pinnedCount(pins: Pins | undefined, server: { name: string; tools?: readonly string[] }): number {
  if (!pins) return 0;
  return [...pins.list(server.name).keys()].filter((t) => !server.tools || server.tools.includes(t)).length;
}
