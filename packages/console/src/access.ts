import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';

/**
 * Who may use the console: the person holding the address `forge console` printed. The address
 * carries a launch token, exchanged at the first visit for a session cookie (HttpOnly, SameSite
 * Strict, this port's name); the token then leaves the address bar. Every request must name this
 * server by a loopback Host (DNS rebinding); one sent by a page of any other origin is refused
 * (Origin, and Sec-Fetch-Site where the browser sends it); a change must also carry the session's
 * CSRF token in a header, which only this console's own script can read.
 */

/** Answers every response carries: nothing from elsewhere, no inline script or style, no framing. */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "font-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; '),
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'cache-control': 'no-store',
};

/** Sessions kept at once; the oldest goes first. */
const MAX_SESSIONS = 64;

interface Session {
  csrf: string;
}

/** Why a request was refused: the status and the sentence shown. */
export interface Denied {
  status: 401 | 403;
  message: string;
}

const token = () => randomBytes(32).toString('base64url');

function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** Refuses a launch token too short or of other characters than base64url's. */
export function assertToken(token: string): void {
  if (!/^[A-Za-z0-9_-]{32,}$/.test(token))
    throw new Error('the console token must be at least 32 characters of A-Z a-z 0-9 _ - (or leave it out: one is made at each launch)');
}

/** The access rules of one console listening on `port`. */
export class ConsoleAccess {
  /** The launch token: in the printed address, and nowhere else. */
  readonly launchToken: string;
  readonly cookie: string;
  readonly #port: number;
  readonly #sessions = new Map<string, Session>();

  constructor(port: number, launchToken: string = token()) {
    assertToken(launchToken);
    this.#port = port;
    this.launchToken = launchToken;
    this.cookie = `forge_console_${port}`;
  }

  /** The Host names this server answers to: loopback, with its port. */
  hostAllowed(host: string | undefined): boolean {
    if (!host) return false;
    const h = host.toLowerCase();
    return [`127.0.0.1:${this.#port}`, `localhost:${this.#port}`, `[::1]:${this.#port}`].includes(h);
  }

  /**
   * Refusals that hold for every request: the Host (a rebinding name) and where the request came
   * from. A request from a page of another origin names it in Origin or Sec-Fetch-Site; a change
   * (anything but GET and HEAD) must name this origin in Origin, as browsers always do.
   */
  checkRequest(req: IncomingMessage): Denied | undefined {
    const host = req.headers.host;
    if (!this.hostAllowed(host))
      return {
        status: 403,
        message: `Host ${JSON.stringify(host ?? '')} is not this console's: open it at http://127.0.0.1:${this.#port}/`,
      };
    const origin = req.headers.origin;
    const own = `http://${(host as string).toLowerCase()}`;
    if (origin !== undefined && origin !== own)
      return { status: 403, message: `a request from ${JSON.stringify(origin)} is not this console's own (${own}); refused` };
    const site = req.headers['sec-fetch-site'];
    if (site !== undefined && site !== 'same-origin' && site !== 'none')
      return {
        status: 403,
        message: `a request from another site (Sec-Fetch-Site: ${site}) is refused: open the console from the address it printed`,
      };
    const change = req.method !== 'GET' && req.method !== 'HEAD';
    if (change && origin === undefined)
      return { status: 403, message: 'a change must come from the console page (no Origin header); refused' };
    return undefined;
  }

  /** The session of a request's cookie, or undefined. */
  session(req: IncomingMessage): Session | undefined {
    const id = readCookie(req.headers.cookie, this.cookie);
    if (!id) return undefined;
    for (const [k, s] of this.#sessions) if (same(k, id)) return s;
    return undefined;
  }

  /** A new session when `given` is the launch token: its Set-Cookie header. */
  exchange(given: string): string | undefined {
    if (!same(given, this.launchToken)) return undefined;
    const id = token();
    this.#sessions.set(id, { csrf: token() });
    while (this.#sessions.size > MAX_SESSIONS) this.#sessions.delete(this.#sessions.keys().next().value as string);
    return `${this.cookie}=${id}; HttpOnly; SameSite=Strict; Path=/`;
  }

  /** A change carries its session's CSRF token in `x-forge-csrf`. */
  csrfHolds(req: IncomingMessage, s: Session): boolean {
    const given = req.headers['x-forge-csrf'];
    return typeof given === 'string' && same(given, s.csrf);
  }
}

function readCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const at = part.indexOf('=');
    if (at > 0 && part.slice(0, at).trim() === name) return part.slice(at + 1).trim();
  }
  return undefined;
}

/** Writes the security headers, then `status` with `body`. */
export function send(
  res: ServerResponse,
  status: number,
  type: string,
  body: string | Uint8Array,
  extra: Record<string, string> = {},
): void {
  res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type, 'content-length': String(Buffer.byteLength(body)), ...extra });
  res.end(body);
}
