/**
 * @forge/policy — the rules forge runs by: the policy document and its JSON Schema, hot reload,
 * decisions as pure functions of a snapshot, breakers, and allow-rules.
 *
 * Public API. Everything exported here is a deliberate, documented decision.
 */
export {
  type BreakerDecision,
  type BreakerEvent,
  type BreakerKind,
  Breakers,
  type BreakersOptions,
  type ToolBreakerState,
} from './breakers.js';
export {
  bindAllow,
  bindRoots,
  type ClampedField,
  checkAllowRule,
  checkCapability,
  checkNamespace,
  checkPersonaAcl,
  checkRuntime,
  checkSecrets,
  checkToolName,
  checkToolOwner,
  clampBudget,
  createSnapshot,
  type Decision,
  type Denial,
  type DenialKind,
  hookNetwork,
  type InjectedSecret,
  isOperator,
  type NetworkGrant,
  networkFor,
  type PolicySnapshot,
  type PolicySource,
  parseToolAcl,
  secretDelivery,
  type ToolAcl,
  type ToolAction,
  type ToolsmithSettings,
  toolsmithFor,
} from './decisions.js';
export {
  type BreakerSettings,
  BUDGET_FIELDS,
  type Budget,
  DEFAULT_POLICY,
  type EffectivePolicy,
  mergePolicies,
  type ParseResult,
  POLICY_SCHEMA,
  type PolicyDocument,
  type PolicyProblem,
  parsePolicyDocument,
  type SandboxOverride,
  type SecretDelivery,
  type ToolsmithMode,
  type ToolsmithPolicy,
} from './document.js';
export { POLICY_ERROR_CODES, PolicyError, type PolicyErrorCode } from './errors.js';
export type { GlobMatcher } from './glob.js';
/**
 * The toolkit of forge's hand-edited JSON documents, shared with @forge/gateway: the strict reader
 * (duplicate keys refused, offsets for file:line:column), JSON pointers, a bounded file read, and
 * the known key closest to a mistyped one (at most two edits away), for "did you mean".
 */
export {
  closestKey,
  type JsonReadResult,
  type JsonText,
  lineColumn,
  pointerPath,
  pointerToken,
  readFileAtMost,
  readJsonText,
  unescapeToken,
  valueAt,
} from './json-document.js';
export { POLICY_LIMITS } from './limits.js';
export { createPolicy, POLICY_SETTLE_MS, type Policy, type PolicyEvent, type PolicyOptions, type PolicyState } from './policy.js';
export {
  type AllowRules,
  parseRules,
  RULE_CLASSES,
  type RuleClass,
  type RulesProblem,
  type RulesResult,
  ruleAllows,
  subjectOf,
} from './rules.js';
