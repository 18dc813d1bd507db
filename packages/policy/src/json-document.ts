import { closeSync, openSync, readSync } from 'node:fs';

/**
 * The toolkit of forge's hand-edited JSON documents (policy.json here, gateway.json in
 * @forge/gateway, which imports it from this package's index): a strict reader that gives the
 * value plus where every value starts, so a syntax error or a schema error can be reported as
 * `file:line:column`; JSON pointers and their reader-facing spelling; a bounded file read; and
 * "did you mean" for a mistyped key. Unlike `JSON.parse` the reader refuses duplicate keys (a
 * second `"per_tool_rpm"` silently winning is how edits go unnoticed) and always says where it
 * stopped. It knows nothing of policy, so a document of another package can use it without
 * pulling in policy's rules; it lives here because policy is a leaf that imports no other
 * `@forge/*` package, and the gateway, above the runner, may import policy.
 */

export interface JsonText {
  value: unknown;
  /** Offset of the value at each JSON pointer ("" is the document). */
  offsets: Map<string, number>;
}

export type JsonReadResult = ({ ok: true } & JsonText) | { ok: false; offset: number; reason: string };

const MAX_DEPTH = 64;

class Stop extends Error {
  constructor(
    readonly offset: number,
    readonly reason: string,
  ) {
    super(reason);
  }
}

/** Escapes a key for a JSON pointer (RFC 6901). */
export function pointerToken(key: string): string {
  return key.replaceAll('~', '~0').replaceAll('/', '~1');
}

/** Undoes {@link pointerToken}. */
export function unescapeToken(t: string): string {
  return t.replaceAll('~1', '/').replaceAll('~0', '~');
}

/** A JSON pointer as a reader writes the path: `/servers/gh/args/0` is `servers.gh.args[0]`. */
export function pointerPath(pointer: string): string {
  let out = '';
  for (const raw of pointer.split('/').slice(1)) {
    const t = unescapeToken(raw);
    out += /^\d+$/.test(t) ? `[${t}]` : out === '' ? t : `.${t}`;
  }
  return out;
}

/** The value at a JSON pointer of `value`, or undefined where the path does not lead. */
export function valueAt(value: unknown, pointer: string): unknown {
  let v = value;
  for (const t of pointer.split('/').slice(1)) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<string, unknown>)[unescapeToken(t)];
  }
  return v;
}

/** The first `max` bytes of `file` (fewer when it is shorter): a file that grows while it is read costs no more. */
export function readFileAtMost(file: string, max: number): Buffer {
  const fd = openSync(file, 'r');
  try {
    const buf = Buffer.allocUnsafe(max);
    let n = 0;
    while (n < max) {
      const got = readSync(fd, buf, n, max - n, null);
      if (got === 0) break;
      n += got;
    }
    return buf.subarray(0, n);
  } finally {
    closeSync(fd);
  }
}

/** Reads one JSON document (surrounding whitespace allowed; a UTF-8 BOM is refused). */
export function readJsonText(text: string): JsonReadResult {
  const offsets = new Map<string, number>();
  let i = 0;

  const ws = () => {
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) i++;
      else break;
    }
  };
  const describe = (at: number) => (at >= text.length ? 'end of file' : JSON.stringify(text[at]));

  const string = (): string => {
    const start = i;
    i++; // the opening quote
    let out = '';
    let run = i;
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        out += text.slice(run, i);
        i++;
        return out;
      }
      if (c < 0x20) throw new Stop(i, 'control character in a string (escape it, e.g. \\n)');
      if (c === 0x5c) {
        out += text.slice(run, i);
        const e = text[i + 1];
        const simple: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
        if (e !== undefined && e in simple) {
          out += simple[e];
          i += 2;
        } else if (e === 'u' && /^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) {
          out += String.fromCharCode(Number.parseInt(text.slice(i + 2, i + 6), 16));
          i += 6;
        } else {
          throw new Stop(i, `invalid escape ${JSON.stringify(text.slice(i, i + 2))} in a string`);
        }
        run = i;
        continue;
      }
      i++;
    }
    throw new Stop(start, 'unterminated string');
  };

  const value = (pointer: string, depth: number): unknown => {
    ws();
    offsets.set(pointer, i);
    if (depth > MAX_DEPTH) throw new Stop(i, `nested deeper than ${MAX_DEPTH} levels`);
    const c = text[i];
    if (c === '{') {
      i++;
      const obj: Record<string, unknown> = {};
      ws();
      if (text[i] === '}') {
        i++;
        return obj;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') throw new Stop(i, `expected a property name in double quotes, found ${describe(i)}`);
        const keyAt = i;
        const key = string();
        if (Object.hasOwn(obj, key)) throw new Stop(keyAt, `duplicate key ${JSON.stringify(key)}`);
        ws();
        if (text[i] !== ':') throw new Stop(i, `expected ":" after ${JSON.stringify(key)}, found ${describe(i)}`);
        i++;
        const v = value(`${pointer}/${pointerToken(key)}`, depth + 1);
        Object.defineProperty(obj, key, { value: v, enumerable: true, writable: true, configurable: true });
        ws();
        if (text[i] === ',') {
          i++;
          ws();
          if (text[i] === '}') throw new Stop(i, 'trailing comma before "}"');
          continue;
        }
        if (text[i] === '}') {
          i++;
          return obj;
        }
        throw new Stop(i, `expected "," or "}" after a property, found ${describe(i)}`);
      }
    }
    if (c === '[') {
      i++;
      const arr: unknown[] = [];
      ws();
      if (text[i] === ']') {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value(`${pointer}/${arr.length}`, depth + 1));
        ws();
        if (text[i] === ',') {
          i++;
          ws();
          if (text[i] === ']') throw new Stop(i, 'trailing comma before "]"');
          continue;
        }
        if (text[i] === ']') {
          i++;
          return arr;
        }
        throw new Stop(i, `expected "," or "]" after an element, found ${describe(i)}`);
      }
    }
    if (c === '"') return string();
    for (const [word, v] of [
      ['true', true],
      ['false', false],
      ['null', null],
    ] as const) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    const m = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
    m.lastIndex = i;
    const num = m.exec(text);
    if (num) {
      i += num[0].length;
      return Number(num[0]);
    }
    throw new Stop(i, `expected a value, found ${describe(i)}`);
  };

  try {
    const v = value('', 0);
    ws();
    if (i < text.length) throw new Stop(i, `unexpected ${describe(i)} after the document`);
    return { ok: true, value: v, offsets };
  } catch (err) {
    if (err instanceof Stop) return { ok: false, offset: err.offset, reason: err.reason };
    throw err;
  }
}

/** 1-based line and column of `offset` in `text`. */
export function lineColumn(text: string, offset: number): { line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  for (let k = 0; k < offset && k < text.length; k++) {
    if (text.charCodeAt(k) === 0x0a) {
      line++;
      lineStart = k + 1;
    }
  }
  return { line, column: offset - lineStart + 1 };
}

/** The known key closest to `key` (at most two edits away), for "did you mean". */
export function closestKey(key: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestD = 3;
  for (const k of known) {
    const d = editDistance(key, k);
    if (d < bestD) {
      best = k;
      bestD = d;
    }
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min((prev[j] as number) + 1, (cur[j - 1] as number) + 1, (prev[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length] as number;
}
