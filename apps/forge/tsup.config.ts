import { packageBuild } from '../../config/tsup.js';

// An executable: no declarations, a shebang. The demo forges the repository's example tools;
// their sources are bundled in as text.
// The MCP server and the SDK under it (with zod and ajv) are bundled in: `forge serve` then
// loads a few files instead of some hundred, which is most of its start time. The engine packages
// stay external: each is one file already and loads its own optional dependencies lazily (the
// toolsmith requires proper-lockfile at its first transition, resolved from its own package).
// OpenTelemetry stays external too: its SDK is loaded only when OTEL_* turns tracing on, as the
// packages it ships (CommonJS re-exporting across packages) expect, and the API is then the one
// the engine packages use.
export default packageBuild({
  entry: ['src/cli.ts'],
  dts: false,
  banner: {
    // Bundled CommonJS (cross-spawn, under the SDK's stdio client) requires Node built-ins.
    js: "#!/usr/bin/env node\nimport { createRequire as __forgeRequire } from 'node:module';\nconst require = __forgeRequire(import.meta.url);",
  },
  loader: { '.py': 'text' },
  noExternal: [/^(?!@forge\/(audit-chain|console|policy|postgres|queue|registry|runner|sandbox|toolsmith)$|@opentelemetry\/)/],
});
