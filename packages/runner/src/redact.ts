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
 * `redactText` for a stderr tail, which may begin in the middle of a secret: a start that is the
 * last 4 or more characters of a secret value is removed as well.
 */
export function redactTail(text: string, secrets: SecretList): string {
  let out = redactText(text, secrets);
  for (const [name, value] of secrets) {
    for (let k = Math.min(value.length - 1, out.length); k >= 4; k--) {
      if (out.startsWith(value.slice(-k))) {
        out = `${redactionMark(name)}${out.slice(k)}`;
        break;
      }
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

/** Rewrites a file with every secret value removed (the file is at most a run's stdout hard cap). */
export function redactFileInPlace(file: string, secrets: SecretList): void {
  const before = readFileSync(file);
  const after = redactBytes(before, secrets);
  if (after !== before) writeFileSync(file, after);
}
