import { expect, it } from 'vitest';

/**
 * Every name @forge/policy exports at runtime, written out: adding or removing an export is an API
 * decision (src/index.ts lists them), so a change to this list must be a deliberate one.
 */
const EXPORTS = [
  'BUDGET_FIELDS',
  'Breakers',
  'DEFAULT_POLICY',
  'POLICY_ERROR_CODES',
  'POLICY_LIMITS',
  'POLICY_SCHEMA',
  'POLICY_SETTLE_MS',
  'PolicyError',
  'RULE_CLASSES',
  'bindAllow',
  'bindRoots',
  'checkAllowRule',
  'checkCapability',
  'checkNamespace',
  'checkPersonaAcl',
  'checkRuntime',
  'checkSecrets',
  'checkToolName',
  'checkToolOwner',
  'clampBudget',
  'closestKey',
  'createPolicy',
  'createSnapshot',
  'hookNetwork',
  'isOperator',
  'lineColumn',
  'mergePolicies',
  'networkFor',
  'parsePolicyDocument',
  'parseRules',
  'parseToolAcl',
  'pointerPath',
  'pointerToken',
  'readFileAtMost',
  'readJsonText',
  'ruleAllows',
  'secretDelivery',
  'subjectOf',
  'toolsmithFor',
  'unescapeToken',
  'valueAt',
];

// Imported while the file is collected, not inside the test: on a busy machine loading the
// package and its dependencies can take longer than a fast test's limit, and that is not what is tested.
// By URL, not a literal specifier: the test typechecks before this package's own build.
const entry: Record<string, unknown> = await import(new URL('../dist/index.js', import.meta.url).href).catch((err: Error) => {
  throw new Error(`${err.message}: build first (pnpm turbo run build --filter=@forge/policy)`);
});

it('the built entry exports exactly the listed names', () => {
  expect(
    Object.keys(entry).sort(),
    'the export list of @forge/policy changed: if that is deliberate, update EXPORTS in test/exports.test.ts',
  ).toEqual(EXPORTS);
});
