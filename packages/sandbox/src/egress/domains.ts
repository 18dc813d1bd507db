import { isIP } from 'node:net';
import { domainToASCII } from 'node:url';
import { canonicalAddress } from './address.js';

const LABEL = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/;
const NUMERIC_LABEL = /^(0x[0-9a-f]*|[0-9]+)$/;

/**
 * A destination host as the guard compares it: an IP address in canonical text (brackets
 * removed), or a lowercase ASCII name without a trailing dot. Undefined for anything else,
 * including names made only of numeric labels (`127.1`, `0x7f.1`, `2130706433`): the C resolver
 * reads those as IPv4 addresses, so they are refused rather than guessed at.
 */
export function normalizeHost(host: string): { kind: 'ip' | 'name'; host: string } | undefined {
  let h = host.trim();
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1);
  if (isIP(h)) return { kind: 'ip', host: h.toLowerCase() };
  if (h.endsWith('.')) h = h.slice(0, -1);
  const ascii = domainToASCII(h);
  if (!ascii || ascii.length > 253) return undefined;
  const labels = ascii.split('.');
  if (!labels.every((l) => LABEL.test(l))) return undefined;
  if (labels.every((l) => NUMERIC_LABEL.test(l))) return undefined;
  return { kind: 'name', host: ascii };
}

/**
 * Whether `host` (normalized) matches a domain pattern: `example.com` matches exactly that name;
 * `*.example.com` matches any name below it (`a.example.com`, `a.b.example.com`) but not
 * `example.com` itself (list both to allow both). An IP address matches only a pattern that is
 * the same address. Comparison ignores case and a trailing dot.
 */
export function matchesDomain(host: string, pattern: string): boolean {
  const p = pattern.trim().toLowerCase().replace(/\.$/, '');
  if (p.startsWith('*.')) {
    const suffix = domainToASCII(p.slice(2));
    return suffix !== '' && host.endsWith(`.${suffix}`) && !isIP(host);
  }
  const exact = normalizeHost(p);
  if (exact?.kind === 'ip') return isIP(host) !== 0 && canonicalAddress(exact.host) === canonicalAddress(host);
  return exact !== undefined && exact.host === host;
}

/** Checks a domain pattern's syntax; returns the reason when it is not one. */
export function checkDomainPattern(pattern: string): string | undefined {
  if (typeof pattern !== 'string') return 'not a string';
  const rest = pattern.startsWith('*.') ? pattern.slice(2) : pattern;
  if (rest.includes('*')) return '"*" is only allowed as the first label ("*.example.com")';
  return normalizeHost(rest) ? undefined : 'not a domain name or IP address';
}
