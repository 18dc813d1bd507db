/** Who may talk to the HTTP server: the Host and Origin a request names, and its bearer token. */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import type { CallContext } from '@forge/runner';
import { ForgeMcpError } from './errors.js';

/** One bearer token's caller: its persona and, optionally, its tool ACL (`FORGE_ALLOWED_TOOLS` syntax). */
export interface HttpTokenGrant {
  persona: string;
  /** Comma list of tool names or globs this persona may call (unset: every tool). Meta-tools are always callable. */
  allowedTools?: string;
}

/** The caller of one request. */
export interface HttpCaller {
  /** Whose sessions and tasks these are: a token's digest, or `loopback` without tokens. */
  principal: string;
  /** The caller as a message names it. */
  who: string;
  ctx: CallContext;
}

export const LOOPBACK_NAMES = new Set(['localhost', '127.0.0.1', '[::1]', '::1']);
const PERSONA = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;
const MIN_TOKEN = 16;

/** True for `localhost`, 127.0.0.0/8 and ::1. */
export function isLoopback(host: string): boolean {
  const h = host.toLowerCase();
  if (LOOPBACK_NAMES.has(h)) return true;
  return isIP(h) === 4 && h.startsWith('127.');
}

/** The request checks of one server: its Host and Origin rules and its tokens. */
export class HttpAccess {
  readonly #loopback: boolean;
  readonly #allowedHosts: string[] | undefined;
  readonly #allowedOrigins: Set<string>;
  /** Token digests → grants. */
  readonly grants: Map<Buffer, HttpTokenGrant>;

  /**
   * @throws ForgeMcpError `tokens_required` for a bind other than loopback without tokens,
   *   `invalid_options` for a malformed token, grant or allowed origin.
   */
  constructor(host: string, options: { tokens?: Record<string, HttpTokenGrant>; allowedOrigins?: string[]; allowedHosts?: string[] }) {
    this.#loopback = isLoopback(host);
    this.grants = checkTokens(options.tokens ?? {});
    if (!this.#loopback && this.grants.size === 0)
      throw new ForgeMcpError(
        'tokens_required',
        `refusing to serve MCP over HTTP on ${host}: an address other than loopback needs bearer tokens, each mapped to a persona (tokens: {"<token>": {"persona": "…"}}); or bind 127.0.0.1`,
      );
    this.#allowedOrigins = new Set(options.allowedOrigins ?? []);
    for (const o of this.#allowedOrigins)
      if (!/^https?:\/\/[^/\s]+$/.test(o))
        throw new ForgeMcpError(
          'invalid_options',
          `allowedOrigins: "${o}" must be a scheme and host with no path, like https://app.example.com`,
        );
    this.#allowedHosts = options.allowedHosts?.map((h) => h.toLowerCase());
  }

  /** A loopback bind answers only loopback names; another, the allowed hosts (any by default) and loopback. */
  hostAllowed(header: string | undefined): boolean {
    if (!header) return false;
    const name = hostname(header);
    if (name === undefined) return false;
    if (this.#loopback) return LOOPBACK_NAMES.has(name);
    return this.#allowedHosts === undefined || this.#allowedHosts.includes(name) || LOOPBACK_NAMES.has(name);
  }

  /** No Origin, a listed one, or a loopback one. */
  originAllowed(origin: string | undefined): boolean {
    if (origin === undefined) return true;
    if (this.#allowedOrigins.has(origin)) return true;
    try {
      const u = new URL(origin);
      return (u.protocol === 'http:' || u.protocol === 'https:') && LOOPBACK_NAMES.has(u.hostname.toLowerCase());
    } catch {
      return false;
    }
  }

  /** The caller of a request: the token's grant (digest as principal), or the anonymous loopback caller; undefined without a valid token. */
  authenticate(req: IncomingMessage): HttpCaller | undefined {
    if (this.grants.size === 0)
      return {
        principal: 'loopback',
        who: 'the loopback caller (without tokens every local client is this one principal; give each client its own token to cap them apart)',
        ctx: {},
      };
    const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
    if (!m?.[1]) return undefined;
    const digest = sha256(m[1]);
    for (const [d, grant] of this.grants) {
      if (timingSafeEqual(d, digest)) {
        const ctx: CallContext = {
          persona: grant.persona,
          ...(grant.allowedTools !== undefined ? { allowedTools: grant.allowedTools } : {}),
        };
        return { principal: d.toString('hex'), who: `the token of persona "${grant.persona}"`, ctx };
      }
    }
    return undefined;
  }
}

function checkTokens(tokens: Record<string, HttpTokenGrant>): Map<Buffer, HttpTokenGrant> {
  const out = new Map<Buffer, HttpTokenGrant>();
  for (const [index, [token, grant]] of Object.entries(tokens).entries()) {
    // Named by a fingerprint, never by any of its characters (a message may reach a log).
    const shown = `#${index + 1} (sha256 ${sha256(token).toString('hex').slice(0, 8)})`;
    if (token.length < MIN_TOKEN || !/^[\x21-\x7e]+$/.test(token))
      throw new ForgeMcpError(
        'invalid_options',
        `tokens: token ${shown} must be at least ${MIN_TOKEN} printable characters without spaces`,
      );
    if (!grant || typeof grant.persona !== 'string' || !PERSONA.test(grant.persona))
      throw new ForgeMcpError(
        'invalid_options',
        `tokens: token ${shown} needs a persona of a letter, then letters, digits, _ or - (got ${JSON.stringify(grant?.persona)})`,
      );
    if (grant.allowedTools !== undefined && typeof grant.allowedTools !== 'string')
      throw new ForgeMcpError('invalid_options', `tokens: token ${shown}: allowedTools must be a comma list string`);
    out.set(sha256(token), grant);
  }
  return out;
}

const sha256 = (s: string): Buffer => createHash('sha256').update(s).digest();

/** The host name of a Host header (`[::1]:8080` → `[::1]`, `Example.com:80` → `example.com`). */
function hostname(header: string): string | undefined {
  const h = header.trim().toLowerCase();
  if (h.startsWith('[')) {
    const end = h.indexOf(']');
    return end < 0 ? undefined : h.slice(0, end + 1);
  }
  const colon = h.indexOf(':');
  return colon < 0 ? h : h.slice(0, colon);
}
