import { checkNamespace, checkRuntime, checkSecrets, checkToolName, type Decision, networkFor, toolsmithFor } from '@forge/policy';
import { staticCheck } from '@forge/registry';
import type { ForgeResult, ForgeToolOptions } from './api.js';
import { AUDIT_UNAVAILABLE } from './auditGate.js';
import { creatorOf } from './caller.js';
import type { Engine } from './engine.js';
import { caseVariantIn, eventTypeOf, ownerCheck } from './gates.js';
import { undoCreate } from './manage.js';
import { type Refusal, refusalKind } from './refusal.js';
import { refuse } from './refuse.js';

/** The ports of forging: who calls, the log, the policy, the registries and sources, runtimes and breakers. */
export type ForgePorts = Pick<
  Engine,
  | 'context'
  | 'admit'
  | 'record'
  | 'unaudited'
  | 'policyNow'
  | 'base'
  | 'layers'
  | 'resolveIn'
  | 'registryFor'
  | 'wireClaims'
  | 'sources'
  | 'notifyChanged'
  | 'runtimes'
  | 'lookUpRuntimeNames'
  | 'breakersOf'
>;

/**
 * The forge pipeline (DESIGN "The two pipelines"): the spec's shape and schemas, the static check,
 * forbidden names, the persona's namespace, case and wire collisions, the runtime, secrets, the
 * forge-count breaker, the registry write under the name's lock, and the audit entry (a write the
 * log does not take is taken back).
 */
export function makeForgeTool(e: ForgePorts): (spec: unknown, o?: ForgeToolOptions) => Promise<ForgeResult> {
  const {
    context,
    record,
    admit,
    policyNow,
    base,
    layers,
    resolveIn,
    runtimes,
    lookUpRuntimeNames,
    breakersOf,
    registryFor,
    wireClaims,
    notifyChanged,
  } = e;
  return async (spec, o = {}) => {
    const ctx = context(o);
    const scope = o.scope ?? 'project';
    const who = creatorOf(ctx);
    const name = typeof (spec as { name?: unknown })?.name === 'string' ? (spec as { name: string }).name : undefined;
    const refused = (r: Refusal, eventType = 'forge.created'): Promise<Refusal> => {
      const { ok: _ok, kind: _kind, message: _message, ...detail } = r;
      return refuse(e, r, { type: eventType, facts: { ...who, scope, ...(name ? { name } : {}), ...detail } });
    };
    // Refused before anything is written while the log takes no appends (the check is a real append).
    const no = await admit(ctx, 'nothing was forged');
    if (no) return refused(no);
    if (scope === 'task' && !ctx.task)
      return refused({ ok: false, kind: 'validation_failed', message: 'scope "task" needs a task id (FORGE_TASK_ID or ctx.task)' });
    const pol = policyNow();
    if (!pol.ok) return refused(pol);
    const snap = pol.snap;
    // Governed mode: new tools come through forge_propose and an approver, never straight in.
    const smith = toolsmithFor(snap, ctx.persona);
    if (smith.mode === 'governed' && !o.activation) {
      const off = smith.enabled
        ? smith.paused
          ? ` (the toolsmith is paused now: ${smith.pausedWhy})`
          : ''
        : ' (the toolsmith is off now: policy toolsmith.enabled is false, so ask an operator to enable it)';
      return refused({
        ok: false,
        kind: 'policy_denied',
        message: `persona "${ctx.persona}" forges in governed mode (policy toolsmith.mode), so forge_tool is refused; propose the tool with forge_propose {capability, description, input_schema, impl, runtime, examples}: it is validated in the sandbox and goes live once an approver approves it${off}`,
      });
    }
    await lookUpRuntimeNames(); // the registry checks the spec's runtime against them
    const checked = base.validate(spec);
    if (!checked.ok) return refused(checked as Refusal);
    const tool = checked.spec;
    const grant = networkFor(snap, ctx.persona);
    const findings = staticCheck(tool, { network: grant.network === 'allow' });
    if (findings.length > 0) {
      return refused({
        ok: false,
        kind: 'static_check_failed',
        message: `impl: ${findings.map((f) => `line ${f.line}: ${f.message} (${f.rule})`).join('; ')}`,
        findings,
      });
    }
    const decisions: Decision[] = [checkToolName(snap, tool.name)];
    for (const d of decisions) if (!d.ok) return refused(d as Refusal);
    const ns = checkNamespace(snap, ctx.persona, tool.name);
    if (!ns.ok) return refused(ns as Refusal, 'tool.namespace_denied');
    // A source's namespace (a gateway server's `<server>.*`) is not forgeable: a forged tool would
    // take the name of the upstream's tool, since forged tools win a call by their name.
    for (const source of e.sources) {
      const owned = source.owns?.(tool.name);
      if (owned) return refused({ ok: false, kind: 'name_taken', message: owned });
    }
    // Taken too: a name that differs only by case from a visible tool (the registry checks its own
    // scopes; the session and task scopes are registries of their own).
    const visible = await layers(ctx);
    const variant = o.overwrite === true && resolveIn(visible, tool.name) ? undefined : caseVariantIn(visible, tool.name);
    if (variant) return refused(variant);
    const rt = checkRuntime(snap, tool.runtime);
    if (!rt.ok) return refused(rt as Refusal);
    // On PATH is not enough (a version manager's shim for a version it has not installed): the
    // interpreter must have answered, or the tool could be forged and never run.
    try {
      await (await runtimes()).resolve(tool.runtime);
    } catch (err) {
      return refused({ ok: false, kind: 'validation_failed', message: `runtime: ${(err as Error).message}` });
    }
    const secrets = checkSecrets(snap, ctx.persona, tool.meta?.secrets ?? []);
    if (!secrets.ok) return refused(secrets as Refusal, 'acl.persona_secret_denied');
    const count = breakersOf(ctx.session).checkForge(ctx.session, snap.policy.breakers);
    if (!count.ok) return refused({ ok: false, kind: count.kind, message: count.message });
    const reg = await registryFor(scope, ctx);
    // A replace needs the replaced tool to be the persona's (asked under the name's lock).
    // Two tools may not share a wire name in any visible scope, racing forges included.
    const replacing = o.overwrite === true && resolveIn(visible, tool.name) !== undefined;
    const written = await wireClaims.hold(visible, tool.name, scope, { kind: 'name_taken', existing: replacing }, () =>
      reg.create(tool, {
        scope,
        createdBy: who,
        overwrite: o.overwrite === true,
        authorize: ownerCheck(snap, ctx.persona, tool.name, 'forge'),
      }),
    );
    if (!written.ok)
      return refused({ ...written, kind: refusalKind(written.kind) }, eventTypeOf(refusalKind(written.kind), 'forge.created'));
    const unrecorded = await record('forge.created', {
      ok: true,
      ...who,
      scope,
      name: written.tool.name,
      version: written.tool.version,
      digest: written.tool.digest,
      runtime: written.tool.runtime,
      ...(written.previous ? { replaced: written.previous } : {}),
      ...(o.activation ? { toolsmith: { proposal: o.activation.proposal, approved_by: o.activation.approvedBy } } : {}),
      policy: snap.digest,
    });
    if (unrecorded) {
      // A forge the log does not show did not happen: the write is taken back.
      const undone = await undoCreate(reg, scope, written.tool.name, written.previous);
      return { ok: false, kind: AUDIT_UNAVAILABLE, message: `${unrecorded.message}; "${written.tool.name}" was not forged: ${undone}` };
    }
    notifyChanged([scope], [written.tool.name]);
    return { ok: true, tool: written.tool, ...(written.previous ? { previous: written.previous } : {}) };
  };
}
