import type { CallContext } from '../api.js';
import { auditSafe, inputDigest } from '../auditData.js';
import { AUDIT_UNAVAILABLE } from '../auditGate.js';
import type { Ctx, Engine } from '../engine.js';
import { type Envelope, failure } from '../envelope.js';
import { redactText, type SecretList } from '../redact.js';

/** One call as it moves through the steps of the call pipeline (pipeline.ts). */
export interface Call {
  /** The name asked for; the forge name once resolved (a client may call by the wire name). */
  name: string;
  readonly input: unknown;
  readonly ctx: Ctx;
  readonly started: number;
  /** One canonical serialisation per call: what the audit log and manifests record. */
  readonly inputDigest: string;
  readonly who: { persona: string; session: string; task?: string };
  /** The secret values this call read (once read): every refusal's text is redacted by them. */
  secrets: SecretList;
  /** The audit entry of the call: `forge.called`, or the source's (`gateway.called`) once resolved to one. */
  eventType: string;
  /**
   * Refuses the call: audited (`eventType`, default the call's) before it answers; a refusal
   * the log cannot take still refuses, as `audit_unavailable`.
   */
  refuse(kind: string, message: string, eventType?: string, extra?: Record<string, unknown>): Promise<Envelope>;
  /** The answer when the log itself is down: nothing can be audited. */
  unrecorded(kind: string, message: string): Envelope;
  /**
   * Set for a call a worker runs for a front-end (dispatch.ts): the job's id, which every entry
   * of the call carries (`call_id`), and the durable note taken before the call's entries are
   * appended, so a second delivery of the job appends what is missing and never twice.
   */
  dispatched?: DispatchedCall;
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

export function openCall(e: Engine, asked: string, input: unknown, c: CallContext): Call {
  const ctx = e.context(c);
  const started = e.now();
  const call: Call = {
    name: asked,
    input,
    ctx,
    started,
    inputDigest: inputDigest(input),
    who: { persona: ctx.persona, session: ctx.session, ...(ctx.task ? { task: ctx.task } : {}) },
    secrets: [],
    eventType: 'forge.called',
    async refuse(kind, message, eventType = call.eventType, extra = {}) {
      const text = redactText(message, call.secrets);
      const data = {
        ok: false,
        name: call.name,
        ...call.who,
        kind,
        message: text,
        input_digest: call.inputDigest,
        ...extra,
        ...(call.dispatched ? { call_id: call.dispatched.callId } : {}),
      };
      const meta = { duration_ms: e.now() - started, cache: 'off' as const };
      const answer = failure(kind, text, meta, extra);
      await call.dispatched?.beforeRecord(
        [{ type: eventType, data: auditSafe(data, call.secrets) as Record<string, unknown> }],
        answer,
        'none',
      );
      const f = await e.record(eventType, data, call.secrets);
      if (f) return failure(AUDIT_UNAVAILABLE, e.unaudited(f, kind, text), meta, { refused: kind });
      return answer;
    },
    unrecorded(kind, message) {
      return failure(kind, message, { duration_ms: e.now() - started, cache: 'off' });
    },
  };
  return call;
}
