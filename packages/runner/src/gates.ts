import {
  checkAllowRule,
  checkNamespace,
  checkPersonaAcl,
  checkToolName,
  checkToolOwner,
  isOperator,
  type PolicySnapshot,
  type ToolAcl,
  type ToolAction,
} from '@forge/policy';
import type { OwnerCheck, ResolvedTool } from '@forge/registry';
import type { Refusal, RefusalKind } from './refusal.js';

/** A refusal of a gate, and the audit event type that records it. */
export type GateRefusal = Refusal & { eventType: string };

/** The audit event type of a refusal `kind` (the specific one where forge has one). */
export function eventTypeOf(kind: RefusalKind, otherwise: string): string {
  if (kind === 'namespace_denied') return 'tool.namespace_denied';
  if (kind === 'acl.persona_denied') return 'acl.persona_denied';
  return otherwise;
}

/**
 * The gates of removing or promoting `name`, cheapest first and before anything touches the
 * disk: the persona ACL (a persona may not manage what it may not call), forbidden names (an
 * operator may still remove one: cleaning up after a policy edit), allow-rules (`tool:<name>
 * execute`, when a rules file is in force), and the persona namespace (lifted for operators).
 * Who owns the tool itself is decided later, under its lock ({@link ownerCheck}).
 */
export function checkManage(
  snap: PolicySnapshot,
  caller: { persona: string; acl: ToolAcl },
  name: string,
  action: 'remove' | 'promote',
  otherwise: string,
): GateRefusal | undefined {
  const { persona } = caller;
  const operator = isOperator(snap, persona);
  const acl = checkPersonaAcl(caller.acl, persona, name);
  if (!acl.ok) return { ...acl, message: acl.message.replace('may not call', `may not ${action}`), eventType: 'acl.persona_denied' };
  if (!(operator && action === 'remove')) {
    const named = checkToolName(snap, name);
    if (!named.ok) return { ...named, eventType: otherwise };
  }
  const rule = checkAllowRule(snap, persona, 'tool', name, 'execute');
  if (!rule.ok) return { ...rule, eventType: otherwise };
  if (!operator) {
    const ns = checkNamespace(snap, persona, name, action);
    if (!ns.ok) return { ...ns, eventType: 'tool.namespace_denied' };
  }
  return undefined;
}

/** The registry's {@link OwnerCheck} for `persona` doing `action` to `name` (see `checkToolOwner`). */
export function ownerCheck(snap: PolicySnapshot, persona: string, name: string, action: ToolAction): OwnerCheck {
  return (existing) => {
    const d = checkToolOwner(snap, persona, { name, creator: existing?.created_by?.persona }, action);
    return d.ok ? undefined : { ok: false, kind: d.kind, message: d.message };
  };
}

/**
 * A visible tool whose name differs from `name` only by case, in any of `layers` (the registry
 * itself refuses one in its own scopes; session and task scopes are other registries).
 */
export function caseVariantIn(layers: readonly { caseVariantOf(name: string): ResolvedTool | undefined }[], name: string) {
  for (const r of layers) {
    const hit = r.caseVariantOf(name);
    if (hit) {
      return {
        ok: false as const,
        kind: 'name_taken' as const,
        message: `tool "${name}" differs only by case from the existing tool "${hit.tool.name}" (${hit.scope} scope), and names are compared regardless of case; choose another name, or forge "${hit.tool.name}" with overwrite to replace that tool`,
      };
    }
  }
  return undefined;
}
