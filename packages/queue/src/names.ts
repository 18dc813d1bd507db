import { QueueError } from './errors.js';
import type { JsonValue } from './types.js';

/** The job id grammar of the JobQueue contract: 1 to 100 of `A-Z a-z 0-9 _ -`, starting with a letter or digit. */
export const JOB_ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$/;

/** The largest serialised payload a job or result may carry (16 MiB). */
export const MAX_PAYLOAD_BYTES = 16 * 1024 * 1024;

const SUFFIX = '.req.json';

/** The request file name J of a job id. */
export function requestName(id: string): string {
  return `${id}${SUFFIX}`;
}

/** The job id of a request file name J, or undefined when the name is not a queue job's. */
export function idOfName(name: string): string | undefined {
  if (!name.endsWith(SUFFIX)) return undefined;
  const id = name.slice(0, -SUFFIX.length);
  return JOB_ID.test(id) ? id : undefined;
}

/** Throws `invalid_job` unless `id` follows the grammar. */
export function checkId(id: unknown, what = 'job id'): string {
  if (typeof id !== 'string' || !JOB_ID.test(id)) {
    const shown = typeof id === 'string' ? JSON.stringify(id.length > 120 ? `${id.slice(0, 120)}…` : id) : typeof id;
    throw new QueueError(
      'invalid_job',
      `${what} ${shown} is not valid: use 1 to 100 characters of A-Z a-z 0-9 _ -, starting with a letter or digit`,
    );
  }
  return id;
}

/** Throws `invalid_job` unless `worker` is a usable worker name: 1 to 200 characters, no control characters. */
export function checkWorker(worker: unknown): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused
  if (typeof worker !== 'string' || worker.length === 0 || worker.length > 200 || /[\u0000-\u001f\u007f]/.test(worker)) {
    throw new QueueError('invalid_job', `worker name ${JSON.stringify(worker)} is not valid: use 1 to 200 printable characters`);
  }
  return worker;
}

/** Throws `invalid_job` unless `value` is plain JSON (no NaN, undefined, functions, class instances or cycles). */
export function checkJson(value: unknown, what: string): JsonValue {
  const seen = new Set<object>();
  const walk = (v: unknown, at: string): void => {
    if (v === null || typeof v === 'string' || typeof v === 'boolean') return;
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) fail(at, `${v} is not a JSON number; use null or a string`);
      return;
    }
    if (typeof v !== 'object') fail(at, `a ${typeof v} is not JSON`);
    const o = v as object;
    if (seen.has(o)) fail(at, 'a cycle (an object that contains itself) is not JSON');
    seen.add(o);
    if (Array.isArray(o)) {
      for (let i = 0; i < o.length; i++) walk(o[i], `${at}/${i}`);
    } else {
      const proto = Object.getPrototypeOf(o);
      if (proto !== Object.prototype && proto !== null) fail(at, `a ${o.constructor?.name ?? 'class'} instance is not plain JSON`);
      for (const [k, item] of Object.entries(o)) walk(item, `${at}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`);
    }
    seen.delete(o);
  };
  const fail = (at: string, why: string): never => {
    throw new QueueError('invalid_job', `${what} at ${at || '/'}: ${why}; pass plain JSON data`);
  };
  walk(value, '');
  return value as JsonValue;
}

/** Serialises a request or result, refusing one whose payload is over MAX_PAYLOAD_BYTES. */
export function serialise(record: object, what: string): Buffer {
  const bytes = Buffer.from(JSON.stringify(record), 'utf8');
  checkSize(bytes.length, what);
  return bytes;
}

/**
 * The JSON text of `value` (a payload, note or result as a store keeps it): throws `invalid_job`
 * unless it is plain JSON (as {@link checkJson}) of at most MAX_PAYLOAD_BYTES serialised.
 */
export function jsonText(value: unknown, what: string): string {
  checkJson(value, what);
  const text = JSON.stringify(value);
  checkSize(Buffer.byteLength(text, 'utf8'), what);
  return text;
}

/** Throws `invalid_job` when `bytes` (a serialised size) is over MAX_PAYLOAD_BYTES. */
function checkSize(bytes: number, what: string): void {
  if (bytes > MAX_PAYLOAD_BYTES) {
    throw new QueueError(
      'invalid_job',
      `${what} is ${bytes} bytes serialised, over the queue's cap of 16 MiB; store large data elsewhere and pass a reference`,
    );
  }
}
