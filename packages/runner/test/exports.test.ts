import { expect, it } from 'vitest';

/**
 * Every name @forge/runner exports at runtime, written out: adding or removing an export is an API
 * decision (src/index.ts lists them), so a change to this list must be a deliberate one.
 */
const EXPORTS = [
  'AUDIT_KEY_NAME',
  'AUDIT_RECOVERED',
  'AUDIT_TAIL_WINDOW',
  'AUDIT_UNAVAILABLE',
  'CACHE_KEY_PATTERN',
  'DEFAULT_ARTIFACT_MAX_BYTES',
  'DEFAULT_CACHE_LIMITS',
  'DEFAULT_EVENT_LIMITS',
  'LOG_LEVELS',
  'MAX_AUDIT_TAIL',
  'MAX_META_FILES',
  'META_TOOLS',
  'MIME_HEAD_BYTES',
  'RUN_ID_PATTERN',
  'WIRE_NAME_PATTERN',
  'artifactPathProblem',
  'artifactUri',
  'assertCacheKey',
  'assertRunId',
  'bindModes',
  'bindsNote',
  'callerInputSchema',
  'callerOutputSchema',
  'createForge',
  'defaultForgeHome',
  'defaultWorkerName',
  'extractTrace',
  'fileCacheStore',
  'fileRunStore',
  'findHooks',
  'findProject',
  'hookRoots',
  'inertText',
  'injectTrace',
  'isCacheEntry',
  'manifestUri',
  'mimeTypeOf',
  'openFilesLimit',
  'parseRunUri',
  'readAuditKey',
  'runIdProblem',
  'stripAnnotations',
  'telemetryApi',
  'toolAnnotations',
  'wireName',
];

// Imported while the file is collected, not inside the test: on a busy machine loading the
// package and its dependencies can take longer than a fast test's limit, and that is not what is tested.
// By URL, not a literal specifier: the test typechecks before this package's own build.
const entry: Record<string, unknown> = await import(new URL('../dist/index.js', import.meta.url).href).catch((err: Error) => {
  throw new Error(`${err.message}: build first (pnpm turbo run build --filter=@forge/runner)`);
});

it('the built entry exports exactly the listed names', () => {
  expect(
    Object.keys(entry).sort(),
    'the export list of @forge/runner changed: if that is deliberate, update EXPORTS in test/exports.test.ts',
  ).toEqual(EXPORTS);
});
