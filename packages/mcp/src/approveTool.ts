/**
 * `forge_approve {id}`: an operator persona approves a validated proposal through its MCP client,
 * and the person at that client confirms it. The model only asks; forge sends the human a
 * form-mode elicitation with a review of the proposal, and only an accepted `approve: true`
 * reaches the toolsmith's `approve`.
 *
 * One return shape serves both eras: the handler answers `inputRequired({…})` (the 2026-07-28
 * multi round-trip request); on a 2025-era connection the SDK's legacy shim sends it to the
 * client as an `elicitation/create` request and calls the handler again with the answer.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Envelope, Refusal } from '@forge/runner';
import { type ClientCapabilities, type InputRequiredResult, inputRequired, inputResponse, type Tool } from '@modelcontextprotocol/server';
import type { ToolsmithSurface, ToolsmithSurfaceReview } from './toolsmithTools.js';

const FORGE_APPROVE: Tool = {
  name: 'forge_approve',
  title: 'Ask the user to approve a proposed tool',
  description: [
    'Ask the person using this client to approve a validated proposal (the id forge_propose answered, state "validated"), so the tool goes live. You cannot approve by yourself: forge shows the user a review of the proposal (its name, capability, who proposed it, description, input, validation and program) and only the user\'s own confirmation in the client approves it.',
    'The answer is ok with the tool that went live (it then appears in tools/list), or an error: policy_denied "not approved at the client" when the user declined or cancelled, or the toolsmith\'s refusal (paused, not validated, a proposal you proposed yourself). Do not call it again for a proposal the user declined unless they ask you to.',
  ].join('\n\n'),
  inputSchema: {
    type: 'object',
    properties: {
      id: { type: 'string', maxLength: 64, description: 'The proposal id (p- and 16 hex digits), as forge_propose answered it.' },
    },
    required: ['id'],
    additionalProperties: false,
  },
  annotations: { title: 'Approve a tool', readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
};

/** The definition of `forge_approve`. */
export const APPROVE_TOOL_DEFINITION: Tool = FORGE_APPROVE;

/**
 * Whether declared client capabilities include form-mode elicitation: `elicitation.form`, or a
 * bare `elicitation: {}` (before modes existed, that meant form).
 */
export function elicitsForm(declared: ClientCapabilities | undefined): boolean {
  const e = declared?.elicitation as Record<string, unknown> | undefined;
  if (e === null || typeof e !== 'object') return false;
  return e.form !== undefined || e.url === undefined;
}

/** What the human is asked for. `approve` defaults to false, so an accept without a choice approves nothing. */
const REQUESTED_SCHEMA = {
  type: 'object',
  properties: {
    approve: {
      type: 'boolean',
      title: 'Approve this tool',
      description: 'Yes: the tool goes live for every agent of this project. No: nothing changes.',
      default: false,
    },
    reason: { type: 'string', title: 'Reason (optional)', maxLength: 500 },
  },
  required: ['approve'],
} as const;

/** Lines and characters of the program (or its diff) the review shows at most. */
const MAX_IMPL_LINES = 60;
const MAX_IMPL_CHARS = 3000;
/** Characters of the proposer's description shown at most. */
const MAX_DESCRIPTION = 600;

/** How long the human may take before the question expires (the SDK's shim waits 10 minutes per leg too). */
const STATE_TTL_MS = 10 * 60_000;
/** Signs the request state: forge accepts only an answer to a question it asked (one key per process, which holds every instance). */
const STATE_KEY = randomBytes(32);

/** Control characters (other than newline and tab) are dropped: the proposer's text cannot restyle the review. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching them is the point
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069]/g;
const clean = (s: string) => s.replace(CONTROL, '');

function cut(text: string, maxLines: number, maxChars: number): string {
  let lines = text.split('\n');
  let note = '';
  if (lines.length > maxLines) {
    note = `\n… (${lines.length - maxLines} more lines: forge toolsmith show for all of it)`;
    lines = lines.slice(0, maxLines);
  }
  let out = lines.join('\n');
  if (out.length > maxChars) {
    out = out.slice(0, maxChars);
    note = `\n… (cut at ${maxChars} characters: forge toolsmith show for all of it)`;
  }
  return out + note;
}

/**
 * The review the human reads: what the proposal is, who proposed it, what validation found and
 * the program (or its diff against the live version). Text the proposing agent wrote is marked as
 * such and cut; the whole record is `forge toolsmith show <id>`.
 */
export function approvalMessage(review: ToolsmithSurfaceReview, asker: string): string {
  const p = review.proposal;
  const v = p.validation;
  const schema = p.spec.input_schema as { properties?: Record<string, unknown>; required?: unknown } | undefined;
  const keys = schema?.properties ? Object.keys(schema.properties) : [];
  const required = new Set(Array.isArray(schema?.required) ? (schema.required as unknown[]) : []);
  const inputs = keys.length > 0 ? keys.map((k) => (required.has(k) ? `${k} (required)` : k)).join(', ') : '(none)';
  const program =
    review.active && review.impl_diff !== ''
      ? `Program, as a diff against live version ${review.active.version}:\n${cut(clean(review.impl_diff), MAX_IMPL_LINES, MAX_IMPL_CHARS)}`
      : `Program (${clean(String(p.spec.runtime))}):\n${cut(clean(String(p.spec.impl)), MAX_IMPL_LINES, MAX_IMPL_CHARS)}`;
  return [
    `forge: agent persona "${asker}" asks YOU to approve a new tool. Approving makes it callable by the agents of this project. Check it yourself; the agent cannot approve it.`,
    '',
    `Proposal: ${p.id}`,
    `Tool name: ${p.name}${review.active ? ` (replaces live version ${review.active.version})` : ''}`,
    `Capability: ${p.capability}`,
    `Proposed by persona: ${p.persona}`,
    `Description (written by the proposing agent): ${cut(clean(String(p.spec.description ?? '')), 20, MAX_DESCRIPTION)}`,
    `Input: ${clean(inputs)}`,
    `Validation: ${v ? `${v.ok ? 'passed' : 'FAILED'}, ${clean(v.summary)} (${v.sandbox_runs} sandbox runs)` : 'none recorded'}`,
    '',
    program,
  ].join('\n');
}

/** The request state of one question: which proposal, whose, what was shown, until when. */
interface AskState {
  id: string;
  persona: string;
  /** The validated spec the review showed (`validation.spec_digest`). */
  spec: string;
  exp: number;
}

function mintState(s: AskState): string {
  const body = Buffer.from(JSON.stringify(s)).toString('base64url');
  return `fa1.${body}.${createHmac('sha256', STATE_KEY).update(body).digest('base64url')}`;
}

function readState(raw: unknown, now: number): AskState | undefined {
  if (typeof raw !== 'string') return undefined;
  const [tag, body, mac, extra] = raw.split('.');
  if (tag !== 'fa1' || !body || !mac || extra !== undefined) return undefined;
  const want = createHmac('sha256', STATE_KEY).update(body).digest();
  const got = Buffer.from(mac, 'base64url');
  if (got.length !== want.length || !timingSafeEqual(got, want)) return undefined;
  try {
    const s = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as AskState;
    return typeof s.exp === 'number' && s.exp >= now ? s : undefined;
  } catch {
    return undefined;
  }
}

const denied = (kind: string, message: string): Envelope => ({ ok: false, error: { kind, message }, meta: {} });

const fromRefusal = (r: Refusal): Envelope => {
  const { ok: _ok, kind, message, ...detail } = r;
  return { ok: false, error: { kind, message, ...detail }, meta: {} };
};

/** What one round of `forge_approve` knows of its request. */
export interface ApproveRound {
  /** The caller's persona: who asks, and in whose name the toolsmith approves. */
  persona: string;
  /** The client capabilities of this request (2026: the request's own; 2025: initialize's). */
  declared: ClientCapabilities | undefined;
  /** The answers a retried request carries (`ctx.mcpReq.inputResponses`). */
  inputResponses: Record<string, unknown> | undefined;
  /** The raw request state it echoes (`ctx.mcpReq.requestState()`). */
  requestState: unknown;
  now?: number;
}

/** Either the question to put to the human (return it from the handler), or the final envelope. */
export type ApproveStep = { ask: InputRequiredResult } | { envelope: Envelope };

const CLI = (id: string) => `forge toolsmith approve ${id}`;

/**
 * One round of `forge_approve`. The first round checks that the persona may approve in its client
 * (policy `toolsmith.approve_in_client`, an approver and an operator), that the client can ask its
 * user, and that the proposal is validated and not the caller's own; then it asks. The round with
 * the answer checks that it answers that question (signed request state: same proposal, persona and
 * spec, not expired), re-reads the policy and the proposal, and only on `accept` with `approve:
 * true` calls `approve(id, {by: persona})`, whose refusals pass through.
 */
export async function runApprove(smith: ToolsmithSurface, args: unknown, round: ApproveRound): Promise<ApproveStep> {
  const id = (args as { id?: unknown } | null)?.id;
  if (typeof id !== 'string' || id === '' || id.length > 64)
    return {
      envelope: denied(
        'invalid_arguments',
        'forge_approve takes {"id": "<proposal id>"}, the id forge_propose answered (p- and 16 hex digits)',
      ),
    };
  const now = round.now ?? Date.now();
  const { persona } = round;
  const show = smith.show?.bind(smith);
  const approve = smith.approve?.bind(smith);
  if (!show || !approve)
    return { envelope: denied('policy_denied', `this forge cannot approve through the client; an approver runs ${CLI(id)}`) };
  const may = (): Envelope | undefined => {
    let s: ReturnType<ToolsmithSurface['status']>;
    try {
      s = smith.status(persona);
    } catch (err) {
      return denied('policy_denied', `the toolsmith's status cannot be read (${(err as Error).message}); nothing was approved`);
    }
    if (s.approvesInClient === true && s.enabled) return undefined;
    return denied(
      'policy_denied',
      `persona "${persona}" may not approve through its client (it needs policy toolsmith.approve_in_client: true and to be in toolsmith.approvers and operator_personas); an approver runs ${CLI(id)}`,
    );
  };
  const notAllowed = may();
  if (notAllowed) return { envelope: notAllowed };
  if (!elicitsForm(round.declared))
    return {
      envelope: denied(
        'policy_denied',
        `this client cannot ask its user to confirm (it did not declare the elicitation capability, form mode), and the agent cannot approve by itself; approval then happens with ${CLI(id)}`,
      ),
    };

  const review = await show(id);
  if (!review.ok) return { envelope: fromRefusal(review) };
  const p = review.proposal;
  const answered = round.inputResponses !== undefined || round.requestState !== undefined;
  if (!answered) {
    // No human time for what cannot be approved: the toolsmith would refuse these after the user said yes.
    if (p.state !== 'validated')
      return {
        envelope: denied(
          'state_conflict',
          `proposal ${id} is ${p.state}, not validated; only a validated proposal can be approved${p.state === 'failed' ? ' (fix it and propose again)' : ''}`,
        ),
      };
    if (p.persona === persona)
      return { envelope: denied('policy_denied', `"${persona}" proposed ${id} and may not approve it; another approver must`) };
    const state: AskState = { id, persona, spec: p.validation?.spec_digest ?? '', exp: now + STATE_TTL_MS };
    return {
      ask: inputRequired({
        inputRequests: {
          approval: inputRequired.elicit({
            mode: 'form',
            message: approvalMessage(review, persona),
            requestedSchema: REQUESTED_SCHEMA as never,
          }),
        },
        requestState: mintState(state),
      }),
    };
  }

  const state = readState(round.requestState, now);
  if (!state || state.id !== id || state.persona !== persona)
    return {
      envelope: denied(
        'policy_denied',
        `the answer does not belong to a question forge asked about ${id} (expired after ${STATE_TTL_MS / 60_000} minutes, or altered); nothing was approved: call forge_approve again`,
      ),
    };
  const view = inputResponse(round.inputResponses, 'approval');
  const content = view.kind === 'elicit' ? view.content : undefined;
  if (view.kind !== 'elicit' || view.action !== 'accept' || content?.approve !== true) {
    const why =
      view.kind !== 'elicit'
        ? 'no answer came back'
        : view.action !== 'accept'
          ? `the user chose ${view.action}`
          : 'the user did not tick approve';
    const reason = typeof content?.reason === 'string' && content.reason !== '' ? ` (reason: ${clean(content.reason).slice(0, 500)})` : '';
    return { envelope: denied('policy_denied', `${id} was not approved at the client: ${why}${reason}; nothing was approved`) };
  }
  // The policy may have changed while the user read the review, and what goes live must be what was shown.
  const stillMay = may();
  if (stillMay) return { envelope: stillMay };
  const now2 = await show(id);
  if (!now2.ok) return { envelope: fromRefusal(now2) };
  if ((now2.proposal.validation?.spec_digest ?? '') !== state.spec)
    return {
      envelope: denied(
        'state_conflict',
        `proposal ${id} changed after the user was shown it; nothing was approved: call forge_approve again`,
      ),
    };
  const r = await approve(id, { by: persona, via: 'client' });
  if (!r.ok) return { envelope: fromRefusal(r) };
  return {
    envelope: {
      ok: true,
      data: {
        id: r.proposal.id,
        state: r.proposal.state,
        name: r.proposal.name,
        version: r.tool.version,
        revalidated: r.revalidated,
        approved_by: persona,
        message: `the user approved ${id} at the client: "${r.proposal.name}" is live (version ${r.tool.version}) and is in your next tools/list`,
      },
      meta: {},
    },
  };
}
