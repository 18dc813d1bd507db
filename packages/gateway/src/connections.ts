import { createHash } from 'node:crypto';
import type { SourceHost } from '@forge/runner';
import type { Resolver } from '@forge/sandbox';
import { launcherFor } from './spawn.js';
import type { ServerConfig } from './types.js';
import { Upstream } from './upstream.js';

/** What the connections are made with (the gateway's options). */
export interface ConnectionSettings {
  gatewayDir: string;
  bwrapPath?: string;
  resolver?: Resolver;
  bindRoots?: readonly string[];
  forgeState?: readonly string[];
  now?: () => number;
}

/** What the connections report to, and learn from, the gateway that holds them. */
export interface ConnectionHooks {
  /** The engine the gateway is attached to, once it is. */
  host(): SourceHost | undefined;
  /** Fire and forget: facts for the audit log. */
  record(type: string, data: Record<string, unknown>): void;
  /** An upstream's tools changed (it sent list_changed and was listed again); must not throw. */
  onToolsChanged(upstream: Upstream): void;
}

/**
 * A flat event with every value of the server's secrets replaced in its strings (compared
 * regardless of case: host names reach the proxy case-folded), so an upstream that puts a
 * credential into a host name does not write it into the audit log.
 */
function withoutSecrets(e: object, server: ServerConfig, secrets: ReadonlyMap<string, string>): Record<string, unknown> {
  const values = Object.values(server.secrets)
    .map((vault) => [vault, secrets.get(vault)] as const)
    .filter((v): v is readonly [string, string] => typeof v[1] === 'string' && v[1] !== '');
  if (values.length === 0) return { ...e };
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(e)) {
    if (typeof v !== 'string') {
      out[k] = v;
      continue;
    }
    let text = v;
    for (const [vault, value] of values) {
      const lower = value.toLowerCase();
      let at = text.toLowerCase().indexOf(lower);
      while (at >= 0) {
        text = `${text.slice(0, at)}<redacted:${vault}>${text.slice(at + value.length)}`;
        at = text.toLowerCase().indexOf(lower, at + vault.length + 11);
      }
    }
    out[k] = text;
  }
  return out;
}

/**
 * What one upstream connection is kept for: the server's definition, the values of its secrets,
 * and the caller's authority (docs/security.md, invariant 1). A connection, and every notification
 * it sends (log messages reach each call in flight on it), is shared only by callers of equal
 * authority; the listing connection, which no call uses, has none.
 */
function connectionKey(server: ServerConfig, secrets: ReadonlyMap<string, string>, authority: string): string {
  const h = createHash('sha256').update(JSON.stringify(server));
  for (const vault of Object.values(server.secrets).sort()) h.update(`\0${vault}\0${secrets.get(vault) ?? ''}`);
  h.update(`\0authority\0${authority}`);
  return `${server.name}\0${h.digest('hex')}`;
}

/**
 * The gateway's upstream connections, one per server definition, secret values and caller
 * authority (see {@link connectionKey}): made on first use, started by the upstream itself, a
 * stale one (its server's definition changed) stopped when its successor is made.
 */
export class Connections {
  readonly #upstreams = new Map<string, Upstream>();
  readonly #settings: ConnectionSettings;
  readonly #hooks: ConnectionHooks;

  constructor(settings: ConnectionSettings, hooks: ConnectionHooks) {
    this.#settings = settings;
    this.#hooks = hooks;
  }

  /** The connection of `server` for these secret values and this authority, made (not started) on first use; stale ones are stopped. */
  get(server: ServerConfig, secrets: ReadonlyMap<string, string>, authority: string): Upstream {
    const key = connectionKey(server, secrets, authority);
    let up = this.#upstreams.get(key);
    if (up) return up;
    // The listing connection has served no call: the first caller whose secrets it was started
    // with (none) takes it over, so one caller's server is one process, not two.
    const listingKey = connectionKey(server, new Map(), 'listing');
    const listing = authority !== 'listing' ? this.#upstreams.get(listingKey) : undefined;
    if (listing && connectionKey(server, secrets, 'listing') === listingKey) {
      this.#upstreams.delete(listingKey);
      this.#upstreams.set(key, listing);
      return listing;
    }
    for (const [k, other] of this.#upstreams) {
      if (other.server.name === server.name && JSON.stringify(other.server) !== JSON.stringify(server)) {
        this.#upstreams.delete(k);
        void other.stop(true);
      }
    }
    const authVault = server.secrets.Authorization;
    up = new Upstream({
      server,
      ...(server.transport === 'http' && authVault !== undefined && secrets.has(authVault)
        ? { authorization: secrets.get(authVault) }
        : {}),
      launch: launcherFor(server, secrets, {
        forgeState: this.#forgeState(),
        // The given roots, else the policy's bind_roots of the engine the gateway is attached to.
        bindRoots: () => this.#settings.bindRoots ?? this.#hooks.host()?.bindRoots() ?? [],
        ...(this.#settings.resolver ? { resolver: this.#settings.resolver } : {}),
        ...(this.#settings.bwrapPath ? { bwrapPath: this.#settings.bwrapPath } : {}),
        // Every decision of the upstream's egress proxy is audited, with the server it belongs to.
        // Host names are the upstream's choice: the values of its secrets are redacted from them.
        onNetworkEvent: (e) => this.#hooks.record(e.type, { ...withoutSecrets(e, server, secrets), server: server.name }),
        // Secrets policy delivers by placeholder stay out of the server's sandbox (read at each start).
        secretDelivery: (names) => this.#hooks.host()?.secretDelivery?.(names) ?? { inject: [] },
        ...(this.#hooks.host()?.upstreamCa ? { upstreamCa: this.#hooks.host()?.upstreamCa } : {}),
      }),
      record: this.#hooks.record,
      onToolsChanged: this.#hooks.onToolsChanged,
      ...(this.#settings.now ? { now: this.#settings.now } : {}),
    });
    this.#upstreams.set(key, up);
    return up;
  }

  /** What no upstream may see: forge's home (audit, policy, cache), the pins, the vault. */
  #forgeState(): string[] {
    if (this.#settings.forgeState) return [...this.#settings.forgeState];
    const out = [this.#settings.gatewayDir];
    const host = this.#hooks.host();
    if (host) out.push(host.home);
    const vault = process.env.FORGE_SECRET_VAULT;
    if (vault) out.push(vault);
    return out;
  }

  /** A connection to list `server` with: one running (any secrets, any caller), else one of its connections, else one without secrets or a caller. */
  lister(server: ServerConfig): Upstream {
    let stopped: Upstream | undefined;
    for (const up of this.#upstreams.values()) {
      if (up.server.name !== server.name || JSON.stringify(up.server) !== JSON.stringify(server)) continue;
      if (up.state === 'running') return up;
      stopped ??= up; // restarted by the listing rather than a second process started beside it
    }
    return stopped ?? this.get(server, new Map(), 'listing');
  }

  /** Every connection of the server named `name`. */
  of(name: string): Upstream[] {
    return [...this.#upstreams.values()].filter((u) => u.server.name === name);
  }

  /** Stops every connection; later uses make new ones. */
  async close(): Promise<void> {
    const ups = [...this.#upstreams.values()];
    this.#upstreams.clear();
    await Promise.all(ups.map((u) => u.stop(true)));
  }
}
