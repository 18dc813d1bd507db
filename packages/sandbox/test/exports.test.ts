import { expect, it } from 'vitest';

/**
 * Every name @forge/sandbox exports at runtime, written out: adding or removing an export is an API
 * decision (src/index.ts lists them), so a change to this list must be a deliberate one.
 */
const EXPORTS = [
  'CODE_PATH_NAMES',
  'DEFAULT_LIMITS',
  'DEFAULT_NODE_PRELOAD',
  'DEFAULT_PYTHON_PRELOAD',
  'DEFAULT_WARM_POOL_BYTES',
  'EGRESS_PORTS',
  'ETC_DIRS',
  'ETC_FILES',
  'EVENTS_FD',
  'PROC_MASKED',
  'PROC_READ_ONLY',
  'ROOT_SANDBOX_UID',
  'SANDBOX_ERROR_CODES',
  'SANDBOX_UID',
  'SECCOMP_RULES',
  'SandboxError',
  'buildBwrapArgs',
  'buildSeccompFilter',
  'canonicalBindPath',
  'checkBind',
  'classifyAddress',
  'closeBinds',
  'defaultDenyList',
  'describeRunLimits',
  'discardPrebuilt',
  'hostSeccompArch',
  'launchFailure',
  'makeStageDir',
  'newPlaceholder',
  'prebuiltStats',
  'probe',
  'resolveLimits',
  'resolveRuntimes',
  'runSandboxed',
  'runtimeNames',
  'sandboxesGone',
  'spawnSandboxed',
  'userTasks',
  'warmBudget',
];

// Imported while the file is collected, not inside the test: on a busy machine loading the
// package and its dependencies can take longer than a fast test's limit, and that is not what is tested.
// By URL, not a literal specifier: the test typechecks before this package's own build.
const entry: Record<string, unknown> = await import(new URL('../dist/index.js', import.meta.url).href).catch((err: Error) => {
  throw new Error(`${err.message}: build first (pnpm turbo run build --filter=@forge/sandbox)`);
});

it('the built entry exports exactly the listed names', () => {
  expect(
    Object.keys(entry).sort(),
    'the export list of @forge/sandbox changed: if that is deliberate, update EXPORTS in test/exports.test.ts',
  ).toEqual(EXPORTS);
});
