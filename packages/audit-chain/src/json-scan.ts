/**
 * Checks that `buf[from, to)` holds exactly one JSON value (RFC 8259), with optional surrounding
 * whitespace, without building it. Used by verification, which must know that an entry's data
 * is JSON but has no use for the value: this is several times cheaper than `JSON.parse`. Iterative
 * (an explicit stack), so hostile nesting cannot overflow the call stack. UTF-8 validity is checked
 * separately (the caller runs `isUtf8` over the whole line).
 */
export function isJsonValue(buf: Uint8Array, from: number, to: number): boolean {
  // Container stack: 1 = object, 2 = array.
  let stack = new Uint8Array(64);
  let depth = 0;
  let i = skipWs(buf, from, to);
  for (;;) {
    // Parse one value at i.
    if (i >= to) return false;
    const c = buf[i] as number;
    if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (depth === stack.length) {
        const bigger = new Uint8Array(stack.length * 2);
        bigger.set(stack);
        stack = bigger;
      }
      stack[depth++] = c === 0x7b ? 1 : 2;
      i = skipWs(buf, i + 1, to);
      if (i < to && buf[i] === (c === 0x7b ? 0x7d : 0x5d)) {
        depth--;
        i++;
      } else if (c === 0x7b) {
        i = objectKey(buf, i, to);
        if (i < 0) return false;
        continue;
      } else {
        continue;
      }
    } else if (c === 0x22 /* " */) {
      i = string(buf, i, to);
    } else if (c === 0x74 /* t */) {
      i = literal(buf, i, to, TRUE);
    } else if (c === 0x66 /* f */) {
      i = literal(buf, i, to, FALSE);
    } else if (c === 0x6e /* n */) {
      i = literal(buf, i, to, NULL);
    } else {
      i = number(buf, i, to);
    }
    if (i < 0) return false;
    // After a value: close containers or move to the next element.
    for (;;) {
      i = skipWs(buf, i, to);
      if (depth === 0) return i === to;
      if (i >= to) return false;
      const d = buf[i] as number;
      const kind = stack[depth - 1];
      if (d === 0x2c /* , */) {
        i = skipWs(buf, i + 1, to);
        if (kind === 1) {
          i = objectKey(buf, i, to);
          if (i < 0) return false;
        }
        break;
      }
      if ((kind === 1 && d === 0x7d) || (kind === 2 && d === 0x5d)) {
        depth--;
        i++;
        continue;
      }
      return false;
    }
  }
}

const TRUE = [0x74, 0x72, 0x75, 0x65];
const FALSE = [0x66, 0x61, 0x6c, 0x73, 0x65];
const NULL = [0x6e, 0x75, 0x6c, 0x6c];

function skipWs(buf: Uint8Array, i: number, to: number): number {
  while (i < to) {
    const c = buf[i];
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    i++;
  }
  return i;
}

/** Parses `"key" :` at i; returns the index after the colon and whitespace, or -1. */
function objectKey(buf: Uint8Array, i: number, to: number): number {
  if (i >= to || buf[i] !== 0x22) return -1;
  i = string(buf, i, to);
  if (i < 0) return -1;
  i = skipWs(buf, i, to);
  if (i >= to || buf[i] !== 0x3a /* : */) return -1;
  return skipWs(buf, i + 1, to);
}

function literal(buf: Uint8Array, i: number, to: number, word: number[]): number {
  if (i + word.length > to) return -1;
  for (let k = 0; k < word.length; k++) if (buf[i + k] !== word[k]) return -1;
  return i + word.length;
}

function isHex(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
}

/** Parses a string starting at the opening quote; returns the index after the closing quote. */
function string(buf: Uint8Array, i: number, to: number): number {
  i++;
  while (i < to) {
    const c = buf[i] as number;
    // One test for the common case: a printable byte that is neither '"' nor '\\'.
    if (c > 0x5c || (c >= 0x20 && c !== 0x22 && c !== 0x5c)) {
      i++;
      continue;
    }
    if (c === 0x22) return i + 1;
    if (c < 0x20) return -1;
    // A backslash escape.
    const e = buf[i + 1];
    if (e === 0x75 /* u */) {
      if (i + 6 > to) return -1;
      for (let k = 2; k < 6; k++) if (!isHex(buf[i + k] as number)) return -1;
      i += 6;
      continue;
    }
    // " \ / b f n r t
    if (e !== 0x22 && e !== 0x5c && e !== 0x2f && e !== 0x62 && e !== 0x66 && e !== 0x6e && e !== 0x72 && e !== 0x74) return -1;
    i += 2;
  }
  return -1;
}

function digits(buf: Uint8Array, i: number, to: number): number {
  const start = i;
  while (i < to && (buf[i] as number) >= 0x30 && (buf[i] as number) <= 0x39) i++;
  return i === start ? -1 : i;
}

/** -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
function number(buf: Uint8Array, i: number, to: number): number {
  if (buf[i] === 0x2d /* - */) i++;
  if (i >= to) return -1;
  if (buf[i] === 0x30) i++;
  else {
    i = digits(buf, i, to);
    if (i < 0) return -1;
  }
  if (i < to && buf[i] === 0x2e /* . */) {
    i = digits(buf, i + 1, to);
    if (i < 0) return -1;
  }
  if (i < to && (buf[i] === 0x65 || buf[i] === 0x45)) {
    i++;
    if (i < to && (buf[i] === 0x2b || buf[i] === 0x2d)) i++;
    i = digits(buf, i, to);
  }
  return i;
}
