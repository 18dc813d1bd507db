import { basename } from 'node:path';
import { hookNetwork, type PolicySnapshot } from '@forge/policy';
import { toolValidators } from '@forge/registry';
import { REDACTED, readAnnotations } from '../annotations.js';
import { inputDigest } from '../auditData.js';
import type { Call } from '../call/call.js';
import type { Denied } from '../call/gates.js';
import type { Target } from '../call/resolve.js';
import { validateInput } from '../call/validate.js';
import { type Envelope, failure } from '../envelope.js';
import type { AuditPort, EngineState, ExecutorsPort, Setup, ToolLookup } from '../ports.js';
import { redactText, type SecretList } from '../redact.js';
import type { SandboxModule } from '../sandboxModule.js';
import { findHooks, type HookFile, type HookStage, hookRoots } from './find.js';
import { type HookPorts, type HookVerdict, runHook } from './run.js';

/**
 * The operator's hooks around a call (docs/architecture.md "Hooks"), on the call pipeline's one
 * path, so they apply to every way a call comes (MCP, the CLI, a tool directory, gateway tools,
 * and a front-end dispatching to workers, where they run once, at the front-end): pre hooks after the input is valid and before anything
 * runs, post hooks on the answer before the caller gets it (a cached one too). Each decision is
 * an audit entry (`hook.decided`), durable before the caller is answered (a refusal waits for it;
 * a decision that lets the call go on is written while the call runs, as the call's own entry
 * is); one the log does not take turns the answer into `audit_unavailable`.
 */

/** What the hooks use of the engine. */
export type HookEngine = Pick<Setup, 'paths' | 'options'> &
  Pick<AuditPort, 'record'> &
  Pick<ExecutorsPort, 'runtimes'> &
  Pick<ToolLookup, 'verified'> & { state: Pick<EngineState, 'stageDir'> };

/**
 * Runs the pre hooks: the call to go on with (its input as the last rewrite left it) and, in
 * `audited`, whether every decision that let it go on was written (the call's answer waits for
 * that, not the run: like the call's own entry, a decision is durable before anyone is answered);
 * or the refusal, once every decision before it is durable.
 */
export async function preHooks(
  e: HookEngine,
  call: Call,
  target: Target,
  snap: PolicySnapshot,
): Promise<{ ok: true; call: Call; audited: Promise<Denied | undefined> } | Denied> {
  // A worker's call was through its front-end's hooks already: they run once per call, there.
  if (call.dispatched) return { ok: true, call, audited: NOTHING_HELD };
  const found = findHooks(hookRoots(e.paths, snap), call.name, 'pre');
  if (!found.ok) return untrusted(e, call, 'pre', found);
  let current = call;
  const written: Promise<Denied | undefined>[] = [];
  for (const hook of found.hooks) {
    const hidden = redactedOf(target, current.input);
    const v = hiddenFrom(
      await runHook(hook, eventOf('pre', current, { input: current.input }), 'input', ports(e, call, hook, snap)),
      hidden,
    );
    const rewritten = v.verdict === 'allow' && v.rewrite ? (v.rewrite.input as unknown) : undefined;
    written.push(decided(e, current, 'pre', hook, v, rewritten !== undefined ? { input_digest: inputDigest(rewritten) } : {}, hidden));
    if (v.verdict !== 'allow') return (await firstLost(written)) ?? refusal(hook, v);
    if (v.rewrite === undefined) continue;
    current = { ...current, input: rewritten, inputDigest: inputDigest(rewritten) };
    // A rewrite is input like any other: valid against the schema, its binds checked when it runs.
    const valid = validateInput(e, current, target);
    if (!valid.ok)
      return (
        (await firstLost(written)) ?? {
          ...valid,
          message: `hook ${hook.path} rewrote the input into one that is refused: ${valid.message}`,
        }
      );
  }
  return { ok: true, call: current, audited: firstLost(written) };
}

const NOTHING_HELD: Promise<undefined> = Promise.resolve(undefined);

/** The first of `written`'s refusals (a decision the log did not take), once all are settled. */
async function firstLost(written: readonly Promise<Denied | undefined>[]): Promise<Denied | undefined> {
  return (await Promise.all(written)).find((d) => d !== undefined);
}

/** Runs the post hooks on `answer`, each decision durable: the answer the caller gets. */
export async function postHooks(e: HookEngine, call: Call, target: Target, answer: Envelope, snap: PolicySnapshot): Promise<Envelope> {
  return (await decidePost(e, call, target, answer, snap)).record();
}

/** The post hooks' verdicts on an answer, their decisions not yet written. */
export interface PostDecisions {
  /**
   * Appends every decision at once, in order, and settles with the answer the caller gets (the
   * refusal when a hook said no or a decision was not taken). Called right after the call's own
   * entry is appended, the two go out in one durable write (see recordRun).
   */
  record(): Promise<Envelope>;
}

const NO_POST_HOOKS = (answer: Envelope): PostDecisions => ({ record: () => Promise.resolve(answer) });

/**
 * Runs the post hooks on `answer` (each on the answer the one before left; none after one that
 * refused or failed) and returns their decisions to write: a call's post hooks run while its own
 * entry waits, so that it and their decisions take one durable write, not two in a row.
 */
export async function decidePost(
  e: HookEngine,
  call: Call,
  target: Target,
  answer: Envelope,
  snap: PolicySnapshot,
): Promise<PostDecisions> {
  if (call.dispatched) return NO_POST_HOOKS(answer);
  const found = findHooks(hookRoots(e.paths, snap), call.name, 'post');
  if (!found.ok) {
    return {
      async record() {
        const no = await untrusted(e, call, 'post', found);
        return failure(no.kind, no.message, answer.meta);
      },
    };
  }
  if (found.hooks.length === 0) return NO_POST_HOOKS(answer);
  let current = answer;
  let refused: Denied | undefined;
  const hidden = redactedOf(target, call.input);
  const decisions: { hook: HookFile; verdict: HookVerdict; extra: Record<string, unknown> }[] = [];
  for (const hook of found.hooks) {
    const v = hiddenFrom(
      await runHook(hook, eventOf('post', call, { run_id: answer.meta.run_id, envelope: current }), 'envelope', ports(e, call, hook, snap)),
      hidden,
    );
    const next = v.verdict === 'allow' && v.rewrite ? envelopeOf(v.rewrite.envelope, current, target) : undefined;
    const verdict: HookVerdict = typeof next === 'string' ? { verdict: 'fail', reason: next, ms: v.ms } : v;
    decisions.push({ hook, verdict, extra: typeof next === 'object' ? { ok: next.ok } : {} });
    if (verdict.verdict !== 'allow') {
      refused = refusal(hook, verdict);
      break;
    }
    if (typeof next === 'object') current = next;
  }
  return {
    async record() {
      // Appended one after another in this turn: one batch of the log.
      const lost = await firstLost(decisions.map((d) => decided(e, call, 'post', d.hook, d.verdict, d.extra, hidden)));
      const no = lost ?? refused;
      return no ? failure(no.kind, no.message, answer.meta) : current;
    },
  };
}

/**
 * The input's `x-redact` values as a redaction list (named by where they are), so that what a
 * hook says about the input (its reason: echoed to the caller, written to the log) never carries
 * them: the log holds no input, and those values not even in a manifest.
 */
function redactedOf(target: Target, input: unknown): SecretList {
  const spec = target.kind === 'forged' ? target.stored : target.tool;
  const { redacted } = readAnnotations(spec.input_schema, input);
  if (redacted === input) return [];
  const out: [string, string][] = [];
  const walk = (orig: unknown, red: unknown, at: string, depth: number) => {
    if (red === REDACTED && orig !== REDACTED) {
      const v = typeof orig === 'string' ? orig : JSON.stringify(orig);
      if (v) out.push([`input${at}`, v]);
      return;
    }
    if (depth > 32 || orig === null || typeof orig !== 'object' || red === null || typeof red !== 'object') return;
    for (const k of Object.keys(orig))
      walk((orig as Record<string, unknown>)[k], (red as Record<string, unknown>)[k], `${at}/${k}`, depth + 1);
  };
  walk(input, redacted, '', 0);
  return out.sort((a, b) => b[1].length - a[1].length);
}

/** `v` with its reason redacted by `hidden`. */
function hiddenFrom(v: HookVerdict, hidden: SecretList): HookVerdict {
  return v.verdict === 'allow' || hidden.length === 0 ? v : { ...v, reason: redactText(v.reason, hidden) };
}

/** A post hook's envelope, kept to what a hook may say (ok, data or error) with forge's own meta, or why it is refused. */
function envelopeOf(raw: unknown, before: Envelope, target: Target): Envelope | string {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return 'printed an envelope that is not an object';
  const r = raw as Record<string, unknown>;
  if (r.ok === true) {
    if (!('data' in r)) return 'printed {"envelope": {"ok": true}} without data';
    const spec = target.kind === 'forged' ? target.stored : target.tool;
    const validators = toolValidators(spec);
    if (!('kind' in validators) && validators.output) {
      const out = validators.output(r.data);
      if (!out.ok) return `rewrote the answer into one its output schema refuses: ${out.message}`;
    }
    return { ok: true, data: r.data, meta: before.meta };
  }
  const err = r.error as Record<string, unknown> | undefined;
  if (r.ok === false && err && typeof err.kind === 'string' && typeof err.message === 'string')
    return failure(err.kind, err.message, before.meta);
  return 'printed an envelope that is neither {"ok": true, "data": …} nor {"ok": false, "error": {"kind", "message"}}';
}

function eventOf(hook: HookStage, call: Call, more: Record<string, unknown>): Record<string, unknown> {
  return {
    hook,
    tool: call.name,
    persona: call.caller.persona,
    session: call.caller.session,
    ...(call.caller.task ? { task: call.caller.task } : {}),
    ...more,
  };
}

function ports(e: HookEngine, call: Call, hook: HookFile, snap: PolicySnapshot): HookPorts {
  // Sandboxes built ahead and warm interpreters, as the engine has them for tools.
  const built = e.options.prebuild !== false;
  const warm = built && e.options.warm !== false ? (typeof e.options.warm === 'object' ? e.options.warm : {}) : undefined;
  return {
    codeDir: e.paths.codeDir,
    runtimes: () => e.runtimes(),
    ...(built ? { stageDir: (lib: SandboxModule) => (e.state.stageDir ??= lib.makeStageDir()) } : {}),
    ...(warm ? { warm } : {}),
    network: {
      grant: hookNetwork(snap),
      // Every decision of the proxy is audited, naming the hook and the call it ran for.
      onEvent: (ev) => void e.record(ev.type, { ...ev, hook: hook.path, name: call.name, ...call.caller }, call.secrets),
      ...(e.options.resolver ? { resolver: e.options.resolver } : {}),
    },
    ...(e.options.bwrapPath ? { bwrapPath: e.options.bwrapPath } : {}),
    ...(call.ctx.signal ? { signal: call.ctx.signal } : {}),
    ...(call.answered ? { teardownAfter: call.answered } : {}),
  };
}

/** The refusal of a hook that said no (`hook_denied`) or failed (`hook_failed`), naming it. */
function refusal(hook: HookFile, v: Exclude<HookVerdict, { verdict: 'allow' }>): Denied {
  return v.verdict === 'deny'
    ? { ok: false, kind: 'hook_denied', message: `hook ${basename(hook.path)} refused the call: ${v.reason}` }
    : { ok: false, kind: 'hook_failed', message: `hook ${hook.path} ${v.reason}; the call is refused while it fails` };
}

/** Records a decision; the refusal to answer with when the log did not take it. */
async function decided(
  e: HookEngine,
  call: Call,
  stage: HookStage,
  hook: HookFile,
  v: HookVerdict,
  extra: Record<string, unknown>,
  hidden: SecretList,
): Promise<Denied | undefined> {
  const verdict = v.verdict === 'allow' ? (Object.keys(extra).length > 0 ? 'rewrite' : 'allow') : v.verdict;
  const f = await e.record(
    'hook.decided',
    {
      stage,
      hook: hook.path,
      digest: hook.digest,
      verdict,
      ...(v.verdict !== 'allow' ? { reason: v.reason } : {}),
      ms: v.ms,
      name: call.name,
      ...call.caller,
      ...(call.dispatched ? { call_id: call.dispatched.callId } : {}),
      ...extra,
    },
    [...call.secrets, ...hidden],
  );
  return f
    ? { ok: false, kind: 'audit_unavailable', message: `hook ${basename(hook.path)}'s decision could not be audited: ${f.message}` }
    : undefined;
}

/** A hooks directory or file that may not be trusted: the call is refused, and that is recorded. */
async function untrusted(e: HookEngine, call: Call, stage: HookStage, found: { path: string; message: string }): Promise<Denied> {
  const message = `hook ${found.path} ${found.message}; no call it applies to runs until that is fixed`;
  await e.record(
    'hook.decided',
    { stage, hook: found.path, verdict: 'fail', reason: found.message, ms: 0, name: call.name, ...call.caller },
    call.secrets,
  );
  return { ok: false, kind: 'hook_failed', message };
}
