import type { ConsoleServices, GatewayDiffView, GatewayToolView } from '@forge/console';
import type { Gateway } from '@forge/gateway';

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
      return (await gateway.servers()).map((s) => {
        const c = config.config.servers.get(s.name);
        return {
          name: s.name,
          transport: s.transport,
          sandboxed: s.sandboxed,
          from: s.from,
          state: s.state,
          tools: s.tools,
          ...(s.error ? { error: s.error } : {}),
          definitionDigest: s.definition,
          ...(c
            ? {
                definition: {
                  file: c.file,
                  ...(c.command ? { command: c.command, args: [...c.args] } : {}),
                  ...(c.url ? { url: c.url } : {}),
                  env: { ...c.env },
                  secrets: { ...c.secrets },
                  binds: c.binds.map((b) => ({ ...b })),
                  network: c.network,
                },
              }
            : {}),
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
