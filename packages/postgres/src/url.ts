/**
 * Connection strings without their passwords, for every message, log line and error.
 */

const MASK = '***';

/**
 * The connection string `url` with its password replaced by `***`: the user-info password
 * (`postgres://user:***@host/db`) and any `password=` or `sslpassword=` parameter. Fails closed:
 * when the user-info cannot be told apart for sure, everything from the first `:` after `//` to
 * the last `@` is masked.
 */
export function redactUrl(url: string): string {
  return maskUserinfo(url).replace(PARAM_RE, (_m, key: string) => `${key}=${MASK}`);
}

/** Masks `user:<password>@`: from the first `:` after `//` to the last `@` (a raw `@` may be in the password). */
function maskUserinfo(token: string): string {
  const i = token.indexOf('//');
  if (i < 0) return token;
  const at = token.lastIndexOf('@');
  if (at < i) return token;
  const colon = token.indexOf(':', i + 2);
  if (colon < 0 || colon > at) return token;
  return `${token.slice(0, colon + 1)}${MASK}${token.slice(at)}`;
}

const URL_RE = /\bpostgres(?:ql)?:\/\/[^\s'"<>]+/gi;
const PARAM_RE = /\b((?:ssl)?password)\s*=\s*(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s&;]+)/gi;

/**
 * `text` with every connection string in it redacted ({@link redactUrl}), every `password=…`
 * (URL query or libpq keyword form) masked, and every literal string of `secrets` (passwords the
 * caller knows it was given) replaced by `***`.
 */
export function redactText(text: string, secrets: readonly string[] = []): string {
  let out = text.replace(URL_RE, (m) => maskUserinfo(m));
  out = out.replace(PARAM_RE, (_m, key: string) => `${key}=${MASK}`);
  for (const s of secrets) if (s.length > 0) out = out.replaceAll(s, MASK);
  return out;
}

/** The passwords a connection string carries (user-info and query), decoded and raw, to scrub. */
export function secretsOf(url: string | undefined): string[] {
  if (!url) return [];
  const out = new Set<string>();
  try {
    const u = new URL(url);
    if (u.password) {
      out.add(u.password);
      out.add(decodeURIComponent(u.password));
    }
    for (const [k, v] of u.searchParams) if (/password$/i.test(k) && v) out.add(v);
  } catch {
    // Unparsable: redactText's patterns still apply.
  }
  return [...out];
}
