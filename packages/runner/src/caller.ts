import { parseToolAcl, type ToolAcl } from '@forge/policy';
import { scopeIdProblem } from '@forge/registry';
import type { CallContext } from './api.js';
import type { ToolEvent } from './events.js';

/**
 * Who asks, as every entry, manifest, job and source sees it: the persona, and the session and
 * task whose scopes apply. Derived from a {@link Ctx} by {@link callerOf} only.
 */
export interface Caller {
  persona: string;
  session: string;
  task?: string;
}

/** A caller, with the defaults of the environment filled in. */
export interface Ctx {
  persona: string;
  session: string;
  task: string | undefined;
  acl: ToolAcl;
  signal: AbortSignal | undefined;
  onEvent: ((event: ToolEvent) => void) | undefined;
}

/** The environment's caller: what a {@link CallContext} leaves out. */
export interface CallerDefaults {
  persona: string;
  session: string;
  task: string | undefined;
  acl: ToolAcl;
}

/** The caller `ctx` names (a task only when there is one). */
export function callerOf(ctx: { persona: string; session: string; task?: string | undefined }): Caller {
  return { persona: ctx.persona, session: ctx.session, ...(ctx.task ? { task: ctx.task } : {}) };
}

/** A caller without its task: see {@link creatorOf}. */
export type Creator = Pick<Caller, 'persona' | 'session'>;

/**
 * Who made or changed a tool, as the registry stamps it (`created_by`) and forge, promote and
 * remove entries name it: the persona and the session.
 */
export function creatorOf(ctx: Pick<Caller, 'persona' | 'session'>): Creator {
  return { persona: ctx.persona, session: ctx.session };
}

/** `c` with the environment's `defaults` filled in. */
export function contextOf(defaults: CallerDefaults, c: CallContext = {}): Ctx {
  return {
    persona: c.persona || defaults.persona,
    session: c.session || defaults.session,
    task: c.task || defaults.task,
    acl: c.allowedTools !== undefined ? parseToolAcl(c.allowedTools) : defaults.acl,
    signal: c.signal,
    onEvent: c.onEvent,
  };
}

/** Why `ctx` cannot be served (ids that could leave their directory, a persona that is no name), or undefined. */
export function contextProblem(ctx: Ctx): string | undefined {
  const sp = scopeIdProblem(ctx.session);
  if (sp) return `session id ${JSON.stringify(ctx.session)} ${sp}`;
  const tp = ctx.task === undefined ? undefined : scopeIdProblem(ctx.task);
  if (tp) return `task id ${JSON.stringify(ctx.task)} ${tp}`;
  if (!/^[A-Za-z][A-Za-z0-9_-]{0,63}$/.test(ctx.persona))
    return `persona ${JSON.stringify(ctx.persona)} must be a letter, then letters, digits, _ or - (at most 64)`;
  return undefined;
}
