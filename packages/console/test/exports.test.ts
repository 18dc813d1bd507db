import { expect, it } from 'vitest';

/**
 * Every name @forge/console exports at runtime, written out: adding or removing an export is an API
 * decision (src/index.ts lists them), so a change to this list must be a deliberate one.
 */
const EXPORTS = ['AuditIndex', 'ConsoleAccess', 'ConsoleError', 'SECURITY_HEADERS', 'callRow', 'startConsole', 'verifyLog'];

// Imported while the file is collected, not inside the test: on a busy machine loading the
// package can take longer than a fast test's limit, and that is not what is tested.
// By URL, not a literal specifier: the test typechecks before this package's own build.
const entry: Record<string, unknown> = await import(new URL('../dist/index.js', import.meta.url).href).catch((err: Error) => {
  throw new Error(`${err.message}: build first (pnpm turbo run build --filter=@forge/console)`);
});

it('the built entry exports exactly the listed names', () => {
  expect(
    Object.keys(entry).sort(),
    'the export list of @forge/console changed: if that is deliberate, update EXPORTS in test/exports.test.ts',
  ).toEqual(EXPORTS);
});
