import { expect, it } from 'vitest';

/**
 * Every name @forge/mcp exports at runtime, written out: adding or removing an export is an API
 * decision (src/index.ts lists them), so a change to this list must be a deliberate one.
 */
const EXPORTS = [
  'APPROVE_TOOL_DEFINITION',
  'FORGE_MCP_ERROR_CODES',
  'ForgeMcpError',
  'META_TOOL_DEFINITIONS',
  'TOOLSMITH_TOOL_DEFINITIONS',
  'createForgeMcpServer',
  'isLoopback',
  'serveHttp',
  'serveStdio',
];

// Imported while the file is collected, not inside the test: on a busy machine loading the
// package and its dependencies can take longer than a fast test's limit, and that is not what is tested.
// By URL, not a literal specifier: the test typechecks before this package's own build.
const entry: Record<string, unknown> = await import(new URL('../dist/index.js', import.meta.url).href).catch((err: Error) => {
  throw new Error(`${err.message}: build first (pnpm turbo run build --filter=@forge/mcp)`);
});

it('the built entry exports exactly the listed names', () => {
  expect(
    Object.keys(entry).sort(),
    'the export list of @forge/mcp changed: if that is deliberate, update EXPORTS in test/exports.test.ts',
  ).toEqual(EXPORTS);
});
