import type { ExhaustedJob, JsonValue } from '@forge/queue';
import { AUDIT_UNAVAILABLE } from '../auditGate.js';
import { callerOf } from '../caller.js';
import { type Envelope, failure } from '../envelope.js';
import type { AuditPort } from '../ports.js';
import { type CallAnswer, readCallJob } from './job.js';
import type { RunOutcome } from './record.js';

/**
 * What a worker notes with a job before it appends the call's entries: the entries themselves,
 * the answer they go with, and the log's head before them. A later delivery of the job (this
 * worker was lost after the note) appends only the entries the log does not hold after `head`,
 * and answers with `answer`: one `forge.called` per call, and no second run.
 */
export interface CallNote {
  v: 1;
  head: number;
  entries: { type: string; data: Record<string, unknown> }[];
  answer: Envelope;
  outcome: RunOutcome['outcome'];
}

/** Appends what the note names and the log lacks after its head, then answers as the note says. */
export async function fromNote(e: Pick<AuditPort, 'record' | 'audit'>, callId: string, note: CallNote): Promise<CallAnswer> {
  await e.audit.flush();
  const present = new Set<string>();
  for await (const entry of e.audit.entries({ from: note.head + 1 })) {
    const data = entry.data as Record<string, unknown> | null;
    if (data && typeof data === 'object' && data.call_id === callId) present.add(entry.type);
  }
  for (const entry of note.entries) {
    if (present.has(entry.type)) continue;
    const lost = await e.record(entry.type, entry.data);
    if (lost) return { envelope: failure(AUDIT_UNAVAILABLE, lost.message, note.answer.meta), outcome: note.outcome };
  }
  return { envelope: note.answer, outcome: note.outcome };
}

/** The answer of a job whose workers were lost too many times: from its note, else recorded as failed here. */
export async function lostAnswer(e: Pick<AuditPort, 'record' | 'audit'>, job: ExhaustedJob): Promise<JsonValue> {
  const note = readNote(job.note);
  if (note) return (await fromNote(e, job.id, note)) as unknown as JsonValue;
  const read = readCallJob(job.payload);
  const message = `the call was lost: the worker running it stopped (killed or crashed) ${job.attempts} time(s) before it finished, so it is not run again; check the workers' logs and call it again`;
  const envelope = failure('internal', message, { cache: 'off' });
  const lost = await e.record('forge.called', {
    ok: false,
    name: read.ok ? read.job.name : null,
    ...(read.ok ? callerOf(read.job) : {}),
    kind: 'internal',
    message,
    attempts: job.attempts,
    call_id: job.id,
  });
  const answer: CallAnswer = lost
    ? { envelope: failure(AUDIT_UNAVAILABLE, lost.message, { cache: 'off' }), outcome: 'failure' }
    : { envelope, outcome: 'failure' };
  return answer as unknown as JsonValue;
}

export function readNote(v: JsonValue | undefined): CallNote | undefined {
  if (!v || typeof v !== 'object' || Array.isArray(v)) return undefined;
  const n = v as Record<string, unknown>;
  if (n.v !== 1 || typeof n.head !== 'number' || !Array.isArray(n.entries) || !n.answer || typeof n.answer !== 'object') return undefined;
  return v as unknown as CallNote;
}
