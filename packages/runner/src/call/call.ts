import type { CallContext } from '../api.js';
import { auditSafe, inputDigest } from '../auditData.js';
import { AUDIT_UNAVAILABLE } from '../auditGate.js';
import { type Caller, type Ctx, callerOf } from '../caller.js';
import { type Envelope, failure } from '../envelope.js';
import type { AuditPort, Callers, Clock } from '../ports.js';
import { redactText, type SecretList } from '../redact.js';
import type { RefusalKind } from '../refusal.js';
import { refuse } from '../refuse.js';

/** One call as it moves through the steps of the call pipeline (pipeline.ts): plain data. */
export interface Call {
  /** The name asked for; the forge name once resolved (a client may call by the wire name). */
  name: string;
  readonly input: unknown;
  readonly ctx: Ctx;
  /** Who calls, as every entry of the call names them. */
  readonly caller: Caller;
  readonly started: number;
  /** One canonical serialisation per call: what the audit log and manifests record. */
  readonly inputDigest: string;
  /** The secret values this call read (once read): every refusal's text is redacted by them. */
  secrets: SecretList;
  /** The audit entry of the call: `forge.called`, or the source's (`gateway.called`) once resolved to one. */
  eventType: string;
  /**
   * Set for a call a worker runs for a front-end (dispatch.ts): the job's id, which every entry
   * of the call carries (`call_id`), and the durable note taken before the call's entries are
   * appended, so a second delivery of the job appends what is missing and never twice.
   */
  dispatched?: DispatchedCall;
  /**
   * Settles once the call is answered (runCall): the sandboxes its hooks and its tool ran in are
   * kept until then, so that their teardowns come after the answer, not beside its next run
   * (the sandbox's `teardownAfter`).
   */
  answered?: PromiseLike<void>;
}

/** What a worker's call does before its entries go to the log (see {@link Call.dispatched}). */
export interface DispatchedCall {
  callId: string;
  /** Saves the entries about to be appended and the answer they go with; resolves once durable. */
  beforeRecord(
    entries: { type: string; data: Record<string, unknown> }[],
    answer: Envelope,
    outcome: 'success' | 'failure' | 'none',
  ): Promise<void>;
}

/** A call of `asked` with `input`, by the caller `c` names (the environment's defaults filled in). */
export function openCall(e: Callers & Clock, asked: string, input: unknown, c: CallContext): Call {
  const ctx = e.context(c);
  return {
    name: asked,
    input,
    ctx,
    caller: callerOf(ctx),
    started: e.now(),
    inputDigest: inputDigest(input),
    secrets: [],
    eventType: 'forge.called',
  };
}

/** The ports a call's refusal uses: the log and the clock (its duration). */
export type RefusePorts = Pick<AuditPort, 'record' | 'unaudited'> & Clock;

/**
 * Refuses the call (refuse.ts): audited (`eventType`, default the call's) before it answers, its
 * text redacted by the call's secrets; a refusal the log cannot take still refuses, as
 * `audit_unavailable`. The answer is an envelope.
 */
export async function refuseCall(
  e: RefusePorts,
  call: Call,
  kind: RefusalKind,
  message: string,
  eventType = call.eventType,
  extra: Record<string, unknown> = {},
): Promise<Envelope> {
  const meta = { duration_ms: e.now() - call.started, cache: 'off' as const };
  // The log is down: nothing can record this refusal, and it names no more than what happened.
  if (kind === AUDIT_UNAVAILABLE) return failure(kind, message, meta);
  const text = redactText(message, call.secrets);
  const { dispatched } = call;
  const r = await refuse(
    e,
    { ok: false, kind, message: text },
    {
      type: eventType,
      facts: {
        name: call.name,
        ...call.caller,
        input_digest: call.inputDigest,
        ...extra,
        ...(dispatched ? { call_id: dispatched.callId } : {}),
      },
      secrets: call.secrets,
      beforeAppend: dispatched
        ? (data) =>
            dispatched.beforeRecord(
              [{ type: eventType, data: auditSafe(data, call.secrets) as Record<string, unknown> }],
              failure(kind, text, meta, extra),
              'none',
            )
        : undefined,
    },
  );
  return r.kind === kind ? failure(kind, text, meta, extra) : failure(r.kind, r.message, meta, { refused: kind });
}
