/**
 * How large a policy file may be. Checked before a file is parsed (its size from `stat`, and the
 * read itself stops one byte past the limit), so a huge file costs a stat, not a parse. The entry
 * counts of policy.json (forbidden names, personas, domains, …) are in its JSON Schema.
 */
export const POLICY_LIMITS = Object.freeze({
  /** Bytes of one policy.json (real ones are a few kilobytes). */
  policyFileBytes: 1024 * 1024,
  /** Bytes of a policy.rules file. */
  rulesFileBytes: 4 * 1024 * 1024,
  /** Rules (non-blank, non-comment lines) of a policy.rules file. */
  rules: 100_000,
});

/** `1048576 bytes (1 MiB)`. */
export function bytesText(n: number): string {
  return n >= 1024 * 1024 && n % (1024 * 1024) === 0 ? `${n} bytes (${n / (1024 * 1024)} MiB)` : `${n} bytes`;
}
