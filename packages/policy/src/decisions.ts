import { createHash } from 'node:crypto';
import { homedir } from 'node:os';
import { resolve } from 'node:path';
import { BUDGET_FIELDS, type Budget, type EffectivePolicy, PROJECT_TOKEN, type SandboxOverride, type ToolsmithMode } from './document.js';
import { compileGlobs, firstMatch, type GlobMatcher } from './glob.js';
import { type AllowRules, ruleAllows, subjectOf } from './rules.js';

/** Error kinds a decision can refuse with (the strings of DESIGN's error kinds). */
export type DenialKind = 'name_forbidden' | 'namespace_denied' | 'acl.persona_denied' | 'policy_denied' | 'secret_denied' | 'breaker_open';

export interface Denial {
  ok: false;
  kind: DenialKind;
  /** What was refused, by which rule, and what to do. */
  message: string;
}

export type Decision = { ok: true } | Denial;

const OK: Decision = Object.freeze({ ok: true });

/** A persona's own entry of a per-persona map (never an inherited `constructor` or `toString`). */
function entry<T>(map: Readonly<Record<string, T>>, persona: string): T | undefined {
  return Object.hasOwn(map, persona) ? map[persona] : undefined;
}

/** Where one part of a snapshot came from. */
export interface PolicySource {
  file: string;
  kind: 'policy' | 'rules';
  /** `loaded`: in force; `absent`: no file; `kept`: the file is bad, its last good version is in force; `invalid`: bad and never good. */
  status: 'loaded' | 'absent' | 'kept' | 'invalid';
}

/**
 * An immutable view of the policy in force. A call takes one at its start and decides
 * everything from it, so a reload in the middle of a call changes nothing for that call.
 */
export interface PolicySnapshot {
  /** Grows by one at each change. */
  readonly generation: number;
  readonly policy: EffectivePolicy;
  /** The allow-rules in force, or null when there is no rules file (then they add nothing). */
  readonly rules: AllowRules | null;
  /** `sha256:` over the canonical effective policy and rules: what was in force, for the audit log. */
  readonly digest: string;
  readonly sources: readonly PolicySource[];
}

interface Compiled {
  forbidden: GlobMatcher;
  runtimes: GlobMatcher;
  /** Each persona's namespace as a lower-cased prefix with its dot (names match regardless of case). */
  namespaces: [persona: string, prefix: string][];
  operators: ReadonlySet<string>;
  capabilities: GlobMatcher;
}
const compiled = new WeakMap<EffectivePolicy, Compiled>();

function compile(p: EffectivePolicy): Compiled {
  let c = compiled.get(p);
  if (!c) {
    c = {
      forbidden: compileGlobs(p.forbidden_tool_names, { ignoreCase: true }),
      runtimes: compileGlobs(p.runtimes.allow),
      namespaces: Object.entries(p.persona_namespaces).map(([persona, ns]) => [persona, `${ns.toLowerCase()}.`]),
      operators: new Set(p.operator_personas),
      capabilities: compileGlobs(p.toolsmith.capability_allow, { ignoreCase: true }),
    };
    compiled.set(p, c);
  }
  return c;
}

/** Builds a snapshot (the policy and rules are used as given; pass frozen values). */
export function createSnapshot(
  policy: EffectivePolicy,
  rules: AllowRules | null,
  sources: readonly PolicySource[] = [],
  generation = 1,
): PolicySnapshot {
  const digest = `sha256:${createHash('sha256')
    .update(canonical({ policy, rules: rules ? [...rules.keys].sort() : null }))
    .digest('hex')}`;
  compile(policy);
  return Object.freeze({ generation, policy, rules, digest, sources: Object.freeze([...sources]) });
}

function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object')
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v);
}

/** Refuses names matching `forbidden_tool_names`, regardless of case (at forge time, and again at every call). */
export function checkToolName(snap: PolicySnapshot, name: string): Decision {
  if (!compile(snap.policy).forbidden.test(name)) return OK;
  const exact = firstMatch(snap.policy.forbidden_tool_names, name);
  const pattern = exact ?? firstMatch(snap.policy.forbidden_tool_names, name, { ignoreCase: true });
  return {
    ok: false,
    kind: 'name_forbidden',
    message: `tool name "${name}" matches the forbidden pattern "${pattern}" (policy forbidden_tool_names${exact ? '' : ', matched regardless of case'}); choose another name`,
  };
}

/** What a persona does with a tool name: forge it (a new tool or a replacement), remove it, or promote it to the user scope. */
export type ToolAction = 'forge' | 'remove' | 'promote';

/** Whether `persona` is listed in `operator_personas` (may remove and promote tools it does not own). */
export function isOperator(snap: PolicySnapshot, persona: string): boolean {
  return compile(snap.policy).operators.has(persona);
}

/** `name` starts with the lower-cased `prefix` (with its dot), in any case. */
function under(name: string, prefix: string): boolean {
  return name.length > prefix.length && name.slice(0, prefix.length).toLowerCase() === prefix;
}

/** The namespace of `persona` as written in the policy, with its `.*`. */
function shown(snap: PolicySnapshot, persona: string): string {
  return `${entry(snap.policy.persona_namespaces, persona)}.*`;
}

/**
 * A persona with a namespace forges, removes and promotes only under it (`coder` with `code` →
 * `code.*`); a persona without one may not touch names under another persona's namespace.
 * Prefixes match regardless of case (`CODE.tool` is in `code.*`).
 */
export function checkNamespace(snap: PolicySnapshot, persona: string, name: string, action: ToolAction = 'forge'): Decision {
  const c = compile(snap.policy);
  const own = entry(snap.policy.persona_namespaces, persona);
  const elsewhere = (other: string): Decision => ({
    ok: false,
    kind: 'namespace_denied',
    message:
      action === 'forge'
        ? `"${name}" is in the namespace of persona "${other}" (${shown(snap, other)}), and persona "${persona}" may not forge there; choose a name outside it`
        : `"${name}" is in the namespace of persona "${other}" (${shown(snap, other)}), and persona "${persona}" may not ${action} tools there; ask persona "${other}" or an operator (policy operator_personas)`,
  });
  if (own !== undefined) {
    const mine = `${own.toLowerCase()}.`;
    // Inside its own namespace, unless that part is another persona's (a longer prefix).
    const deeper =
      under(name, mine) && c.namespaces.find(([other, prefix]) => other !== persona && prefix.length > mine.length && under(name, prefix));
    if (deeper) return elsewhere(deeper[0]);
    if (under(name, mine)) return OK;
    return {
      ok: false,
      kind: 'namespace_denied',
      message:
        action === 'forge'
          ? `persona "${persona}" may only forge tools named ${own}.<name> (policy persona_namespaces); rename "${name}" to ${own}.${name.split('.').pop()}`
          : `persona "${persona}" may only ${action} tools named ${own}.<name> (policy persona_namespaces), and "${name}" is not one; ask its owner or an operator (policy operator_personas)`,
    };
  }
  for (const [other, prefix] of c.namespaces) if (under(name, prefix)) return elsewhere(other);
  return OK;
}

/** Whether `name` lies under some persona's namespace (regardless of case). */
function inAnyNamespace(snap: PolicySnapshot, name: string): boolean {
  return compile(snap.policy).namespaces.some(([, prefix]) => under(name, prefix));
}

/**
 * Who may remove, promote or replace an existing tool:
 * - an operator persona (`operator_personas`): any tool;
 * - a tool under a persona namespace belongs to that namespace: {@link checkNamespace} decides;
 * - a tool outside every namespace belongs to the persona that forged it (`creator`, the tool's
 *   `created_by.persona`; `undefined` when its file cannot say, and then only an operator may).
 * Refuses with `namespace_denied` or `acl.persona_denied`.
 */
export function checkToolOwner(
  snap: PolicySnapshot,
  persona: string,
  tool: { name: string; creator: string | undefined },
  action: ToolAction,
): Decision {
  if (isOperator(snap, persona)) return OK;
  if (inAnyNamespace(snap, tool.name) || entry(snap.policy.persona_namespaces, persona) !== undefined)
    return checkNamespace(snap, persona, tool.name, action);
  if (tool.creator === persona) return OK;
  const verb = action === 'forge' ? 'replace' : action;
  return {
    ok: false,
    kind: 'acl.persona_denied',
    message:
      tool.creator === undefined
        ? `persona "${persona}" may not ${verb} "${tool.name}": its file does not say who forged it, so only an operator persona (policy operator_personas) may`
        : `persona "${persona}" may not ${verb} "${tool.name}": it was forged by persona "${tool.creator}", and a tool outside every namespace can be ${verb === 'promote' ? 'promoted' : verb === 'remove' ? 'removed' : 'replaced'} only by the persona that forged it or an operator persona (policy operator_personas)`,
  };
}

/** Which tools a persona may call: every tool, or the names and globs of `FORGE_ALLOWED_TOOLS`. */
export type ToolAcl = { readonly all: true } | { readonly all: false; readonly patterns: readonly string[]; readonly match: GlobMatcher };

/** Parses `FORGE_ALLOWED_TOOLS` (a comma list of names or globs; unset means every tool). */
export function parseToolAcl(value: string | undefined): ToolAcl {
  if (value === undefined) return { all: true };
  const patterns = value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  return { all: false, patterns, match: compileGlobs(patterns) };
}

/** Refuses a tool outside the persona's ACL. Meta-tools (`metaTools`) are always callable. */
export function checkPersonaAcl(acl: ToolAcl, persona: string, name: string, metaTools: readonly string[] = []): Decision {
  if (acl.all || acl.match.test(name) || metaTools.includes(name)) return OK;
  return {
    ok: false,
    kind: 'acl.persona_denied',
    message: `persona "${persona}" may not call "${name}": it is not in FORGE_ALLOWED_TOOLS (${acl.patterns.join(', ') || 'empty'}); ask the operator to add it`,
  };
}

/**
 * When a rules file is in force, requires `allow <persona>_t <cls>:<name> <permission>`;
 * without one, allows (the other checks still apply).
 */
export function checkAllowRule(
  snap: PolicySnapshot,
  persona: string,
  cls: 'tool' | 'network',
  name: string,
  permission: 'execute' | 'connect',
): Decision {
  if (!snap.rules || ruleAllows(snap.rules, subjectOf(persona), cls, name, permission)) return OK;
  return {
    ok: false,
    kind: 'policy_denied',
    message: `${snap.rules.file} has no rule "allow ${subjectOf(persona)} ${cls}:${name} ${permission}", and allow-rules deny what they do not allow; add that line to permit it`,
  };
}

/** The network a persona's tools get, decided once per call. */
export interface NetworkGrant {
  network: 'allow' | 'deny';
  loopback: 'allow' | 'deny';
  private_networks: 'allow' | 'deny';
  allow_domains: readonly string[];
  deny_domains: readonly string[];
  /** Empty: any port. */
  allow_ports: readonly number[];
  /** Why network is denied when the persona's override allows it (allow-rules), else undefined. */
  denied_by?: string;
}

/** The network grant of `persona`: closed unless `persona_sandbox_overrides` opens it (and allow-rules, when present, agree). */
export function networkFor(snap: PolicySnapshot, persona: string): NetworkGrant {
  const grant = grantOf(entry(snap.policy.persona_sandbox_overrides, persona) ?? {});
  if (grant.network === 'allow') {
    const rule = checkAllowRule(snap, persona, 'network', 'default', 'connect');
    if (!rule.ok)
      return {
        network: 'deny',
        loopback: 'deny',
        private_networks: 'deny',
        allow_domains: [],
        deny_domains: [],
        allow_ports: [],
        denied_by: rule.message,
      };
  }
  return grant;
}

/** The network a call hook's sandbox gets: closed unless policy `hooks.network` opens it. */
export function hookNetwork(snap: PolicySnapshot): NetworkGrant {
  return grantOf(snap.policy.hooks.network ?? {});
}

function grantOf(o: Readonly<SandboxOverride>): NetworkGrant {
  return {
    network: o.network ?? 'deny',
    loopback: o.loopback ?? 'deny',
    private_networks: o.private_networks ?? 'deny',
    allow_domains: o.allow_domains ?? [],
    deny_domains: o.deny_domains ?? [],
    allow_ports: o.allow_ports ?? [],
  };
}

/** Refuses secrets the persona is not allowed (fail-closed: a persona without an entry gets none). */
export function checkSecrets(snap: PolicySnapshot, persona: string, names: readonly string[]): Decision {
  if (names.length === 0) return OK;
  const allowed = entry(snap.policy.persona_secret_allow, persona);
  const missing = names.filter((n) => !allowed?.includes(n));
  if (missing.length === 0) return OK;
  return {
    ok: false,
    kind: 'secret_denied',
    message: allowed
      ? `persona "${persona}" may not use secret${missing.length > 1 ? 's' : ''} ${missing.map((n) => `"${n}"`).join(', ')} (policy persona_secret_allow.${persona} lists ${allowed.join(', ') || 'none'})`
      : `persona "${persona}" may not use any secret: policy persona_secret_allow has no entry for it (an operator adds "${persona}": [${missing.map((n) => `"${n}"`).join(', ')}])`,
  };
}

/** A secret delivered by placeholder: what the egress proxy needs of its policy (names lower-cased). */
export interface InjectedSecret {
  name: string;
  hosts: string[];
  headers: string[];
  format: string;
}

/**
 * How policy delivers each of `names` (`secret_delivery`): in the environment (`env`, the
 * default), or by placeholder (`inject`: hosts and header names lower-cased, a host's trailing dot
 * dropped, `format` defaulting to `{}`).
 */
export function secretDelivery(snap: PolicySnapshot, names: readonly string[]): { env: string[]; inject: InjectedSecret[] } {
  const env: string[] = [];
  const inject: InjectedSecret[] = [];
  for (const name of names) {
    const how = entry(snap.policy.secret_delivery, name);
    if (how === undefined || how === 'env') env.push(name);
    else
      inject.push({
        name,
        hosts: [...new Set(how.inject.hosts.map((h) => h.toLowerCase().replace(/\.$/, '')))],
        headers: [...new Set(how.inject.headers.map((h) => h.toLowerCase()))],
        format: how.inject.format ?? '{}',
      });
  }
  return { env, inject };
}

/** One budget field a tool asked for above the policy's ceiling. */
export interface ClampedField {
  field: keyof Budget;
  requested: number;
  applied: number;
}

/** The budget of a call: the tool's requests (or the defaults), each lowered to its ceiling, and what was lowered. */
export function clampBudget(snap: PolicySnapshot, requested: Partial<Budget> = {}): { budget: Budget; clamped: ClampedField[] } {
  const { defaults, ceilings } = snap.policy.budgets;
  const budget = { ...defaults };
  const clamped: ClampedField[] = [];
  for (const field of BUDGET_FIELDS) {
    const want = requested[field];
    if (want === undefined || !Number.isSafeInteger(want) || want <= 0) continue;
    budget[field] = Math.min(want, ceilings[field]);
    if (want > ceilings[field]) clamped.push({ field, requested: want, applied: ceilings[field] });
  }
  return { budget, clamped };
}

/**
 * Where `x-bind` paths may point, as absolute paths: `~` is `home`, `${project}` is `project`
 * (entries using it are left out when there is no project).
 */
export function bindRoots(snap: PolicySnapshot, where: { project?: string; home?: string } = {}): string[] {
  return expandPaths(snap.policy.bind_roots, where);
}

/**
 * The paths `bind_allow` names, as absolute paths (expanded as {@link bindRoots} expands its
 * entries): binds the sandbox would refuse as places a host program finds code to run.
 */
export function bindAllow(snap: PolicySnapshot, where: { project?: string; home?: string } = {}): string[] {
  return expandPaths(snap.policy.bind_allow, where);
}

function expandPaths(entries: readonly string[], where: { project?: string; home?: string }): string[] {
  const home = where.home ?? homedir();
  const out: string[] = [];
  for (const r of entries) {
    let p: string;
    if (r === '~' || r.startsWith('~/')) p = home + r.slice(1);
    else if (r.startsWith(PROJECT_TOKEN)) {
      if (!where.project) continue;
      p = where.project + r.slice(PROJECT_TOKEN.length);
    } else p = r;
    const abs = resolve(p);
    if (!out.includes(abs)) out.push(abs);
  }
  return out;
}

/** Refuses a runtime that `runtimes.allow` does not list. */
export function checkRuntime(snap: PolicySnapshot, runtime: string): Decision {
  if (compile(snap.policy).runtimes.test(runtime)) return OK;
  return {
    ok: false,
    kind: 'policy_denied',
    message: `runtime "${runtime}" is not allowed by policy runtimes.allow (${snap.policy.runtimes.allow.join(', ') || 'none'})`,
  };
}

/** What the toolsmith may do for one persona now (see {@link toolsmithFor}). */
export interface ToolsmithSettings {
  enabled: boolean;
  /** The kill switch, or a policy file that failed to reload (fail-safe). */
  paused: boolean;
  /** Why it is paused, in words, when it is. */
  pausedWhy?: string;
  mode: ToolsmithMode;
  threshold: number;
  windowMs: number;
  approvers: readonly string[];
  /** May `persona` approve through its MCP client (policy approve_in_client, and it is an operator and an approver)? */
  approvesInClient: boolean;
  cycleIntervalMs: number;
  gapStoreMax: number;
}

/**
 * The toolsmith's settings for `persona` from a snapshot. Paused when the policy says so, and
 * also when any policy file in force is only its last good version (a reload failed): an edit
 * that cannot be read might have been the kill switch.
 */
export function toolsmithFor(snap: PolicySnapshot, persona: string): ToolsmithSettings {
  const t = snap.policy.toolsmith;
  const kept = snap.sources.find((s) => s.status === 'kept' || s.status === 'invalid');
  const pausedWhy = t.paused
    ? 'policy toolsmith.paused is true (the kill switch); an operator sets it to false to resume'
    : kept
      ? `the policy file ${kept.file} failed to reload, so the toolsmith is paused until it reads again (fail-safe); fix the file`
      : undefined;
  return {
    enabled: t.enabled,
    paused: pausedWhy !== undefined,
    ...(pausedWhy ? { pausedWhy } : {}),
    mode: t.mode[persona] ?? t.mode['*'] ?? 'direct',
    threshold: t.gap_recurrence_threshold,
    windowMs: t.gap_window_hours * 3_600_000,
    approvers: t.approvers,
    approvesInClient: t.approve_in_client && t.approvers.includes(persona) && compile(snap.policy).operators.has(persona),
    cycleIntervalMs: t.cycle_interval_seconds * 1000,
    gapStoreMax: t.gap_store_max,
  };
}

/** Whether a capability may be authored: it must match `toolsmith.capability_allow` (empty allows none), regardless of case. */
export function checkCapability(snap: PolicySnapshot, capability: string): Decision {
  if (compile(snap.policy).capabilities.test(capability)) return OK;
  const allow = snap.policy.toolsmith.capability_allow;
  return {
    ok: false,
    kind: 'policy_denied',
    message:
      allow.length === 0
        ? `capability "${capability}" may not be authored: policy toolsmith.capability_allow allows no capability; an operator adds a glob that covers it (e.g. "${capability.split('.')[0]}.*")`
        : `capability "${capability}" is outside policy toolsmith.capability_allow (${allow.map((a) => JSON.stringify(a)).join(', ')}); request one of those, or ask an operator to allow it`,
  };
}
