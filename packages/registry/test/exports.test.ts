import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { compileToolSchema } from '../src/index.js';

/**
 * Every name @forge/registry exports at runtime, written out: adding or removing an export is an API
 * decision (src/index.ts lists them), so a change to this list must be a deliberate one.
 */
const EXPORTS = [
  'DEFAULT_RUNTIMES',
  'MAX_NAME_BYTES',
  'MAX_PATTERN_REPEAT',
  'REGISTRY_ERROR_CODES',
  'RegistryError',
  'SCOPES',
  'STAMP_FIELDS',
  'STATIC_RULES',
  'TOOL_SCHEMA_AJV_OPTIONS',
  'TOOL_SPEC_SCHEMA',
  'TOOL_STATES',
  'VALIDATION_BUDGET_MS',
  'WIRE_NAME_PATTERN',
  'checkStoredRecord',
  'compileToolSchema',
  'createRegistry',
  'describeCharacter',
  'digestSpec',
  'escapeCharacter',
  'fileToolStore',
  'findUnsafeCharacter',
  'inertJson',
  'inertText',
  'isValidToolName',
  'linkNew',
  'markWireConflicts',
  'replaceWith',
  'runtimeFamily',
  'scopeIdProblem',
  'scopeRoots',
  'staticCheck',
  'syncDir',
  'toolNameProblem',
  'toolValidators',
  'validateSpec',
  'verifyToolDigest',
  'wireKey',
  'wireLockKey',
  'wireName',
  'wireTaken',
  'writeTemp',
];

// Imported while the file is collected, not inside the test: on a busy machine loading the
// package and its dependencies can take longer than a fast test's limit, and that is not what is tested.
// By URL, not a literal specifier: the test typechecks before this package's own build.
const entry: Record<string, unknown> = await import(new URL('../dist/index.js', import.meta.url).href).catch((err: Error) => {
  throw new Error(`${err.message}: build first (pnpm turbo run build --filter=@forge/registry)`);
});

it('the built entry exports exactly the listed names', () => {
  expect(
    Object.keys(entry).sort(),
    'the export list of @forge/registry changed: if that is deliberate, update EXPORTS in test/exports.test.ts',
  ).toEqual(EXPORTS);
});

it('the ./inert entry exports the text guards alone, the same functions as the main entry', async () => {
  const inert: Record<string, unknown> = await import(new URL('../dist/inert.js', import.meta.url).href);
  expect(Object.keys(inert).sort()).toEqual(['describeCharacter', 'escapeCharacter', 'findUnsafeCharacter', 'inertJson', 'inertText']);
  expect(inert.inertText).toBe(entry.inertText);
});

it('the built package compiles tool schemas with its one-file ajv (dist/ajv.cjs), and judges as ajv from source does', () => {
  const schema = { type: 'object', properties: { at: { type: 'string', format: 'date-time' } }, required: ['at'] };
  const compile = entry.compileToolSchema as typeof compileToolSchema;
  const built = compile(schema);
  const fromSource = compileToolSchema(structuredClone(schema));
  if (!built.ok || !fromSource.ok) throw new Error(`the schema did not compile: ${JSON.stringify([built, fromSource])}`);
  const file = fileURLToPath(new URL('../dist/ajv.cjs', import.meta.url));
  const require = createRequire(import.meta.url);
  expect(require.cache[file], `${file} was not the ajv the built package loaded`).toBeDefined();
  expect(Object.keys(require(file)).sort()).toEqual(['Ajv', 'Ajv2020', 'addFormats']);
  for (const data of [{ at: '2026-12-03T12:00:00Z' }, { at: 'noon' }, {}]) expect(built.validate(data)).toEqual(fromSource.validate(data));
});
