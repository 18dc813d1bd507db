import { readFileSync, writeFileSync } from 'node:fs';

/** What a secret value is replaced with: the secret's name, never its value. */
export function redactionMark(name: string): string {
  return `<redacted:${name}>`;
}

/** Secrets as `[name, value]`, longest value first (so a value containing another is caught whole). */
export type SecretList = readonly (readonly [name: string, value: string])[];

export function secretList(values: ReadonlyMap<string, string>): SecretList {
  return [...values].filter(([, v]) => v !== '').sort((a, b) => b[1].length - a[1].length);
}

/** Replaces every occurrence of every secret value in `text` by its mark. */
export function redactText(text: string, secrets: SecretList): string {
  let out = text;
  for (const [name, value] of secrets) if (out.includes(value)) out = out.split(value).join(redactionMark(name));
  return out;
}

/**
 * `redactText` matching ASCII letters in any case, for text a case-blind system handled on the
 * way (host names: DNS and the HTTP stack fold them, so `Tok` may come back as `tok`).
 */
export function redactTextFolded(text: string, secrets: SecretList): string {
  let out = redactText(text, secrets);
  for (const [name, value] of secrets) {
    const want = asciiLower(value);
    const mark = redactionMark(name);
    for (let at = asciiLower(out).indexOf(want); at >= 0; at = asciiLower(out).indexOf(want, at + mark.length)) {
      out = `${out.slice(0, at)}${mark}${out.slice(at + value.length)}`;
    }
  }
  return out;
}

const asciiLower = (s: string) => s.replace(/[A-Z]+/g, (m) => m.toLowerCase());

/** Past this depth a subtree is replaced whole (it cannot be checked cheaply, so it is not shown). */
export const REDACT_DEPTH = 32;

/**
 * A copy of `value` with every secret value removed from every string leaf and every object key,
 * at any depth up to {@link REDACT_DEPTH}; deeper subtrees are replaced by a mark. Returns the
 * value itself when there is nothing to redact.
 */
export function redactValue(value: unknown, secrets: SecretList, depth = 0): unknown {
  if (secrets.length === 0) return value;
  if (typeof value === 'string') return redactText(value, secrets);
  if (value === null || typeof value !== 'object') return value;
  if (depth >= REDACT_DEPTH) return '<redacted:too_deep>';
  if (Array.isArray(value)) return value.map((v) => redactValue(v, secrets, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    Object.defineProperty(out, redactText(k, secrets), {
      value: redactValue(v, secrets, depth + 1),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}

/** Whether any secret value occurs anywhere in `text`. */
export function containsSecret(text: string, secrets: SecretList): boolean {
  return secrets.some(([, v]) => text.includes(v));
}

/**
 * At most `max` characters of `text`: its start (`keep: 'start'`) or its end (`'end'`). Every
 * secret value is redacted *before* the cut, so a value straddling the cut cannot show in part;
 * the cut never splits a redaction mark or a surrogate pair. Every place forge shortens text that
 * may hold a secret (messages, tails, audit strings) goes through here.
 */
export function excerpt(text: string, secrets: SecretList, max: number, keep: 'start' | 'end' = 'start'): string {
  const full = secrets.length > 0 ? redactText(text, secrets) : text;
  if (full.length <= max) return full;
  let at = keep === 'start' ? max : full.length - max;
  for (const m of full.matchAll(MARK_RE)) {
    const end = m.index + m[0].length;
    if (m.index >= at) break;
    if (end > at) {
      // A mark across the cut is left out whole rather than shown in part.
      at = keep === 'start' ? m.index : end;
      break;
    }
  }
  if (isLowSurrogate(full.charCodeAt(at))) at += keep === 'start' ? -1 : 1;
  return keep === 'start' ? full.slice(0, at) : full.slice(at);
}

const MARK_RE = /<redacted:[^<>]*>/g;
const isLowSurrogate = (c: number) => c >= 0xdc00 && c <= 0xdfff;

/**
 * `redactText` for a tail whose start may have been cut off upstream (the sandbox keeps the last
 * bytes of stderr, before forge knows which values are secret). With `cut`, a start that is the
 * end of a secret value (any length) is removed too, after the U+FFFD of a cut multi-byte
 * character: a suffix of 4 or more characters becomes the secret's mark, a shorter one `…`.
 */
export function redactTail(text: string, secrets: SecretList, cut = true): string {
  let out = redactText(text, secrets);
  if (!cut || secrets.length === 0) return out;
  out = out.replace(/^\uFFFD+/, '');
  let best: { name: string; k: number } | undefined;
  for (const [name, value] of secrets) {
    for (let k = Math.min(value.length - 1, out.length); k > (best?.k ?? 0); k--) {
      if (out.startsWith(value.slice(-k))) {
        best = { name, k };
        break;
      }
    }
  }
  return best ? `${best.k >= 4 ? redactionMark(best.name) : '…'}${out.slice(best.k)}` : out;
}

/**
 * The end-of-text counterpart of {@link redactTail}, for bytes whose end was cut (a tool killed
 * while printing): an end that is the start of a secret value (any length) is replaced as well.
 */
export function redactCutEnd(buf: Buffer, secrets: SecretList): Buffer {
  const out = redactBytes(buf, secrets);
  let best: { name: string; k: number } | undefined;
  for (const [name, value] of secrets) {
    const needle = Buffer.from(value, 'utf8');
    for (let k = Math.min(needle.length - 1, out.length); k > (best?.k ?? 0); k--) {
      if (out.subarray(out.length - k).equals(needle.subarray(0, k))) {
        best = { name, k };
        break;
      }
    }
  }
  if (!best) return out;
  return Buffer.concat([out.subarray(0, out.length - best.k), Buffer.from(best.k >= 4 ? redactionMark(best.name) : '…')]);
}

/**
 * `redactText` for a message that embeds text cut upstream at an unknown place (a sandbox error
 * quoting the stderr tail): every end of a secret value of 4 or more characters is removed
 * wherever it occurs. Over-redacts on purpose; use only where the cut cannot be located.
 */
export function redactWithFragments(text: string, secrets: SecretList): string {
  let out = redactText(text, secrets);
  for (const [name, value] of secrets) {
    for (let k = value.length - 1; k >= 4; k--) {
      const part = value.slice(-k);
      if (out.includes(part)) out = out.split(part).join(redactionMark(name));
    }
  }
  return out;
}

/** Replaces every occurrence of every secret value's UTF-8 bytes in `buf`. */
export function redactBytes(buf: Buffer, secrets: SecretList): Buffer {
  let out = buf;
  for (const [name, value] of secrets) {
    const needle = Buffer.from(value, 'utf8');
    const mark = Buffer.from(redactionMark(name), 'utf8');
    let at = out.indexOf(needle);
    if (at < 0) continue;
    const parts: Buffer[] = [];
    let from = 0;
    while (at >= 0) {
      parts.push(out.subarray(from, at), mark);
      from = at + needle.length;
      at = out.indexOf(needle, from);
    }
    parts.push(out.subarray(from));
    out = Buffer.concat(parts);
  }
  return out;
}

/**
 * Rewrites a file with every secret value removed (the file is at most a run's stdout hard cap).
 * With `cutEnd` (the writer was killed mid-output), a trailing start of a secret goes too.
 */
export function redactFileInPlace(file: string, secrets: SecretList, options: { cutEnd?: boolean } = {}): void {
  const before = readFileSync(file);
  const after = options.cutEnd ? redactCutEnd(before, secrets) : redactBytes(before, secrets);
  if (after !== before) writeFileSync(file, after);
}
