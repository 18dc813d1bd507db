import { AuditError } from './errors.js';

/** A JSON value that survives a round trip through any conforming parser (RFC 7493, I-JSON). */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

const MAX_DEPTH = 100;

/** RFC 6901 JSON pointer of `path` ('' is the whole value). */
function pointer(path: readonly (string | number)[]): string {
  return path.map((p) => `/${String(p).replaceAll('~', '~0').replaceAll('/', '~1')}`).join('');
}

function fail(path: readonly (string | number)[], what: string, hint: string): never {
  const where = path.length === 0 ? 'data' : `data at ${pointer(path)}`;
  throw new AuditError('invalid_data', `${where}: ${what}; ${hint}`);
}

/**
 * Throws `invalid_data` unless `value` is plain I-JSON: null, booleans, finite numbers with
 * integers inside ±(2^53 − 1), well-formed strings, dense arrays and plain objects, no cycles,
 * at most 100 levels deep. The message names the JSON pointer of the first bad value.
 */
export function assertIJson(value: unknown): asserts value is JsonValue {
  const ancestors = new Set<object>();
  const path: (string | number)[] = [];

  const visit = (v: unknown): void => {
    switch (typeof v) {
      case 'string':
        if (!v.isWellFormed()) fail(path, 'string contains a lone surrogate', 'encode binary data as base64 or hex');
        return;
      case 'boolean':
        return;
      case 'number':
        if (!Number.isFinite(v)) fail(path, `${v} is not a JSON number`, 'use null or a string');
        if (Number.isInteger(v) && !Number.isSafeInteger(v)) {
          fail(path, `integer ${v} is beyond ±(2^53 − 1) and loses precision`, 'send it as a string');
        }
        return;
      case 'bigint':
        fail(path, 'BigInt is not JSON', 'send it as a string');
      case 'undefined':
        fail(path, 'undefined is not JSON', 'omit the key or use null');
      case 'function':
        fail(path, 'a function is not JSON', 'log data, not code');
      case 'symbol':
        fail(path, 'a symbol is not JSON', 'use a string');
    }
    if (v === null) return;
    const obj = v as object;
    if (ancestors.has(obj)) fail(path, 'cycle: the value contains itself', 'log a reference (an id) instead');
    if (path.length >= MAX_DEPTH) fail(path, `nested deeper than ${MAX_DEPTH} levels`, 'flatten the data');
    ancestors.add(obj);
    if (Array.isArray(obj)) {
      for (let i = 0; i < obj.length; i++) {
        path.push(i);
        if (!(i in obj)) fail(path, 'hole in a sparse array', 'fill it with null');
        visit(obj[i]);
        path.pop();
      }
    } else {
      const proto = Object.getPrototypeOf(obj);
      if (proto !== Object.prototype && proto !== null) {
        const kind = (obj as { constructor?: { name?: string } }).constructor?.name ?? 'object';
        const hint =
          kind === 'Date'
            ? 'use date.toISOString()'
            : kind === 'Map'
              ? 'use Object.fromEntries(map)'
              : kind === 'Set'
                ? 'use an array'
                : 'convert it to a plain object or array';
        fail(path, `${kind} is not a plain JSON object`, hint);
      }
      if (Object.getOwnPropertySymbols(obj).length > 0) {
        fail(path, 'object has symbol keys, which JSON drops', 'use string keys');
      }
      for (const key of Object.keys(obj)) {
        path.push(key);
        if (!key.isWellFormed()) fail(path, 'key contains a lone surrogate', 'use well-formed keys');
        visit((obj as Record<string, unknown>)[key]);
        path.pop();
      }
    }
    ancestors.delete(obj);
  };

  visit(value);
}
