import { MAX_PAYLOAD_BYTES } from './names.js';
import type { JobResult, JobStatus, JsonValue } from './types.js';

/** Most bytes of a request, result or lease file the queue reads (the payload cap plus room for the envelope). */
export const MAX_FILE_BYTES = MAX_PAYLOAD_BYTES + 64 * 1024;

/** A request file (pending/J, claimed/J/J, done/J, failed/J). */
export interface RequestRecord {
  id: string;
  payload: JsonValue;
  /** Wall clock of the publish (ms). */
  published_at: number;
  /** The host's monotonic clock at the publish (ns, a decimal string): orders publishes within one millisecond. */
  mono: string;
}

/** A lease file (lease/J/worker; lease/J/finishing while its holder finishes; lease/J/lost-* once lost). */
export interface LeaseRecord {
  worker: string;
  pid: number;
  host: string;
  attempt: number;
  /** Tells this claim apart from any other claim of the same job. */
  token: string;
  expires_at: number;
}

/** A result file (done/J.result, failed/J.result). */
export interface ResultRecord {
  status: JobStatus;
  payload: JsonValue;
  attempt: number;
  finished_at: number;
  worker: string | null;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A parsed request of job `id`, or undefined when the file is not one. */
export function asRequest(v: unknown, id: string): RequestRecord | undefined {
  if (!isObj(v) || v.id !== id || typeof v.published_at !== 'number' || !('payload' in v)) return undefined;
  return {
    id,
    payload: v.payload as JsonValue,
    published_at: v.published_at,
    mono: typeof v.mono === 'string' && /^\d+$/.test(v.mono) ? v.mono : '0',
  };
}

/** A parsed lease, or undefined when the file is not one. */
export function asLease(v: unknown): LeaseRecord | undefined {
  if (!isObj(v) || typeof v.worker !== 'string' || typeof v.token !== 'string') return undefined;
  if (typeof v.attempt !== 'number' || typeof v.expires_at !== 'number') return undefined;
  return v as unknown as LeaseRecord;
}

/** A parsed result as the JobQueue API gives it, or undefined when the file is not one. */
export function asResult(v: unknown, id: string): JobResult | undefined {
  if (!isObj(v) || !['done', 'failed', 'cancelled'].includes(v.status as string)) return undefined;
  if (typeof v.attempt !== 'number' || typeof v.finished_at !== 'number') return undefined;
  return {
    id,
    status: v.status as JobStatus,
    payload: (v.payload ?? null) as JsonValue,
    attempt: v.attempt,
    finishedAt: v.finished_at,
  };
}
