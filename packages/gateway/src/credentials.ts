/**
 * What looks like a credential in a configuration file. gateway.json may name secrets (by vault
 * name) but never hold one, so these checks err on the side of refusing: a false alarm costs the
 * operator one vault entry, a miss leaves a token in a file a repository may commit.
 */

/** Variable and flag names that carry credentials (`GITHUB_TOKEN`, `--api-key`, `DB_PASSWORD`, …). */
const CREDENTIAL_NAME = /TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|KEY|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|BEARER|_PAT$|^PAT_/i;

/** Prefixes of well-known token formats. */
const TOKEN_PREFIXES = [
  /^gh[pousr]_[A-Za-z0-9]{16,}/, // GitHub
  /^github_pat_/,
  /^glpat-/, // GitLab
  /^sk-[A-Za-z0-9_-]{8,}/, // OpenAI, Anthropic (sk-ant-…)
  /^sk_(live|test)_/, // Stripe
  /^rk_(live|test)_/,
  /^xox[abposr]-/, // Slack
  /^xapp-/,
  /^(AKIA|ASIA)[A-Z0-9]{12,}/, // AWS access key ids
  /^AIza[0-9A-Za-z_-]{20,}/, // Google API keys
  /^ya29\./, // Google OAuth
  /^npm_[A-Za-z0-9]{20,}/,
  /^hf_[A-Za-z0-9]{20,}/, // Hugging Face
  /^pypi-/,
  /^shp(at|ss|ca|pa)_/, // Shopify
  /^eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/, // a JWT
  /^(Bearer|Basic|token)\s+\S{8,}/i,
  /^-----BEGIN [A-Z ]*PRIVATE KEY-----/,
];

/** True when `name` (an environment variable or a flag) is the kind that carries a credential. */
export function isCredentialName(name: string): boolean {
  return CREDENTIAL_NAME.test(name);
}

/**
 * Why `value` looks like a credential, or undefined. Known token prefixes anywhere after a `=` or
 * at the start, a URL with a password, and long random-looking strings (32+ characters of one
 * token alphabet mixing letters and digits: API keys, hex secrets) all count.
 */
export function credentialValueProblem(value: string): string | undefined {
  const candidates = [value, ...value.split(/[=:\s]/).slice(1)];
  for (const c of candidates) {
    if (TOKEN_PREFIXES.some((p) => p.test(c))) return 'it has the form of an access token';
  }
  if (/^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/@\s]*:[^/@\s]*@/.test(value)) return 'it is a URL with a password in it';
  if (value.length >= 32 && /^[A-Za-z0-9_+/=.-]+$/.test(value) && /[0-9]/.test(value) && /[A-Za-z]/.test(value) && !value.includes('/'))
    return 'it is a long random-looking string (an API key or a secret)';
  return undefined;
}

/**
 * Why an argv list carries a credential, with the index of the offending argument, or undefined:
 * a value with a token's form, `--api-key=…`, or the argument after a flag named like a credential
 * (`--token xyz`).
 */
export function credentialArgProblem(args: readonly string[]): { index: number; reason: string } | undefined {
  for (const [i, a] of args.entries()) {
    const inline = /^--?([A-Za-z][A-Za-z0-9_-]*)=(.+)$/s.exec(a);
    if (inline && isCredentialName(inline[1] as string) && !isPath(inline[2] as string))
      return { index: i, reason: `it passes a value to the credential flag --${inline[1]}` };
    const value = credentialValueProblem(a);
    if (value) return { index: i, reason: value };
    const flag = /^--?([A-Za-z][A-Za-z0-9_-]*)$/.exec(a);
    const next = args[i + 1];
    if (flag && isCredentialName(flag[1] as string) && next !== undefined && !next.startsWith('-') && !isPath(next))
      return { index: i + 1, reason: `it is the value of the credential flag ${a}` };
  }
  return undefined;
}

/**
 * Why a URL carries a credential, or undefined: a user or password in it, or a query parameter
 * named like a credential (`?api_key=…`, `?token=…`).
 */
export function credentialUrlProblem(url: URL): string | undefined {
  if (url.username || url.password) return 'it has a user name or password in it';
  for (const [k, v] of url.searchParams) {
    if (isCredentialName(k)) return `its query parameter "${k}" carries a credential`;
    if (credentialValueProblem(v)) return `its query parameter "${k}" holds what looks like a token`;
  }
  return undefined;
}

/** A file path names where a key is, not the key: `--tls-key /etc/ssl/k.pem` passes no secret. */
function isPath(v: string): boolean {
  return /^(\/|\.\.?\/|~\/)/.test(v) && !/\s/.test(v);
}
