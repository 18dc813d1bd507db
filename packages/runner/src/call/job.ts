import { randomBytes } from 'node:crypto';
import type { JsonValue } from '@forge/queue';
import type { Envelope } from '../envelope.js';
import type { TraceCarrier } from '../telemetry.js';
import type { RunOutcome } from './record.js';

/**
 * A call as a front-end hands it to a worker: which tool (pinned by digest), the input, and who
 * calls. The worker trusts none of it: it resolves the tool itself, runs every gate and the input
 * validation again under its own policy, and refuses a tool whose digest is not the one named.
 */
export interface CallJob {
  v: 1;
  name: string;
  digest: string;
  version: number;
  scope: string;
  input: JsonValue;
  persona: string;
  session: string;
  task?: string;
  /** The caller's tool ACL (patterns), or null for all tools. */
  acl: string[] | null;
  /** The front-end that published it (`<host>-<pid>`). */
  from: string;
  /** The W3C trace context of the front-end's call, when it was traced: the worker's span continues it. */
  trace?: TraceCarrier;
}

/** What a worker finishes a call job with: the answer, as recorded in the worker's log. */
export interface CallAnswer {
  envelope: Envelope;
  outcome: RunOutcome['outcome'];
}

/** A call id: the job's id in the queue and `call_id` in the worker's entries. */
export function newCallId(now: number): string {
  return `c${now.toString(36)}-${randomBytes(8).toString('hex')}`;
}

/** A call job read from a queue, or why it is not one. */
export function readCallJob(payload: JsonValue): { ok: true; job: CallJob } | { ok: false; reason: string } {
  if (!payload || typeof payload !== 'object' || Array.isArray(payload)) return { ok: false, reason: 'the payload is not an object' };
  const j = payload as Record<string, JsonValue>;
  if (j.v !== 1) return { ok: false, reason: `unknown call job version ${JSON.stringify(j.v)} (this worker reads version 1)` };
  for (const k of ['name', 'digest', 'scope', 'persona', 'session', 'from'] as const)
    if (typeof j[k] !== 'string' || j[k] === '') return { ok: false, reason: `"${k}" is not a non-empty string` };
  if (typeof j.version !== 'number' || !Number.isInteger(j.version)) return { ok: false, reason: '"version" is not an integer' };
  if (j.task !== undefined && typeof j.task !== 'string') return { ok: false, reason: '"task" is not a string' };
  if (j.acl !== null && !(Array.isArray(j.acl) && j.acl.every((p) => typeof p === 'string' && !p.includes(','))))
    return { ok: false, reason: '"acl" is neither null nor a list of patterns' };
  if (!('input' in j)) return { ok: false, reason: '"input" is missing' };
  return { ok: true, job: j as unknown as CallJob };
}
