import type { ConsoleServices, GatewayDiffView, GatewayToolView } from '@forge/console';
import { type Gateway, serverDefinition } from '@forge/gateway';

type GatewayServices = Pick<ConsoleServices, 'gatewayServers' | 'gatewayTools' | 'gatewayDiff' | 'gatewayApprove' | 'gatewayUnpin'>;

const none = {
  ok: false as const,
  kind: 'unavailable',
  message:
    'no gateway here: declare upstream servers in $FORGE_HOME/gateway.json or .forge/gateway.json (forge gateway import <file>), then start the console again',
};

/**
 * The console's gateway pages over the engine's gateway: `forge gateway list`, `tools`, `diff`,
 * `approve` and `remove`, the same calls. An approval pins only the definitions the operator was
 * shown (their digests), so what is approved is what was reviewed; it is recorded as by
 * `operator:<name>` like the CLI's, and `via: console`.
 */
export function gatewayServices(gateway: Gateway | undefined): GatewayServices {
  return {
    async gatewayServers() {
      if (!gateway) return [];
      const config = gateway.config();
      if (!config.ok) return { ok: false, kind: config.kind, message: config.message };
      // What each server's approval covers, shown exactly as its digest is made (the same parts),
      // from this one snapshot of the configuration: what the page shows is what the digest names.
      const defs = new Map([...config.config.servers.values()].map((c) => [c.name, serverDefinition(c)]));
      return (await gateway.servers()).map((s) => {
        const d = defs.get(s.name);
        return {
          name: s.name,
          transport: s.transport,
          sandboxed: s.sandboxed,
          from: s.from,
          state: s.state,
          tools: s.tools,
          ...(s.error ? { error: s.error } : {}),
          ...(d ? { definitionDigest: d.digest, definition: { ...d.parts, file: d.file } } : {}),
        };
      });
    },
    async gatewayTools(server) {
      if (!gateway) return none;
      const r = await gateway.tools(server);
      return Array.isArray(r) ? (r as unknown as GatewayToolView[]) : r;
    },
    async gatewayDiff(server) {
      if (!gateway) return none;
      const r = await gateway.diff(server);
      return Array.isArray(r) ? (r as unknown as GatewayDiffView[]) : r;
    },
    async gatewayApprove(server, reviewed, operator) {
      if (!gateway) return none;
      const r = await gateway.approve(server, Object.keys(reviewed.expect), `operator:${operator}`, { ...reviewed, via: 'console' });
      return r.ok ? { ok: true, approved: r.approved.map((t) => t.name) } : r;
    },
    async gatewayUnpin(server, tools, operator) {
      if (!gateway) return none;
      return gateway.unpin(server, tools, `operator:${operator}`, { via: 'console' });
    },
  };
}
