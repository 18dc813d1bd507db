import { ForgeMcpError } from './errors.js';

/** The session limits of one HTTP server, after defaults and checks. */
export interface SessionLimits {
  /** Most sessions open at once, over every principal. */
  maxSessions: number;
  /** Most sessions one principal (a token, or the one loopback caller without tokens) may hold. */
  perPrincipal: number;
  /** A session with nothing open for this long is closed. */
  idleMs: number;
  /** How often idle sessions are swept (a closed session frees its slot at the next sweep). */
  sweepMs: number;
}

/** What {@link admitSession} needs to know of an open session. */
export interface SessionUse {
  principal: string;
  /** Requests or streams open now: a session with any is never idle. */
  open: number;
  /** When its last request ended (ms since the epoch). */
  lastSeen: number;
}

/** A new session refused: the HTTP status, a message saying what to do, and when to retry. */
export interface SessionRefusal {
  ok: false;
  status: 429 | 503;
  message: string;
  /** Seconds until a slot frees by idle expiry at the latest, for `Retry-After`. */
  retryAfterS: number;
}

const positiveInt = (name: string, v: number): number => {
  if (!Number.isInteger(v) || v < 1)
    throw new ForgeMcpError('invalid_options', `${name} must be a positive integer (got ${JSON.stringify(v)})`);
  return v;
};

/**
 * The limits of {@link serveHttp}'s options. The per-principal cap defaults to an even share of
 * `maxSessions` among the principals (the tokens, or the single loopback caller without tokens),
 * so no principal can ever keep another from opening its share.
 *
 * @throws ForgeMcpError `invalid_options` for a cap or idle time that is not a positive integer,
 *   or a per-principal cap above `maxSessions`.
 */
export function resolveSessionLimits(
  o: { maxSessions?: number; maxSessionsPerPrincipal?: number; sessionIdleMs?: number },
  principals: number,
): SessionLimits {
  const maxSessions = positiveInt('maxSessions', o.maxSessions ?? 256);
  const perPrincipal =
    o.maxSessionsPerPrincipal === undefined
      ? Math.max(1, Math.floor(maxSessions / Math.max(1, principals)))
      : positiveInt('maxSessionsPerPrincipal', o.maxSessionsPerPrincipal);
  if (perPrincipal > maxSessions)
    throw new ForgeMcpError(
      'invalid_options',
      `maxSessionsPerPrincipal (${perPrincipal}) is above maxSessions (${maxSessions}): lower it, or raise maxSessions`,
    );
  const idleMs = positiveInt('sessionIdleMs', o.sessionIdleMs ?? 30 * 60_000);
  return { maxSessions, perPrincipal, idleMs, sweepMs: Math.max(10, Math.min(60_000, Math.floor(idleMs / 4))) };
}

/**
 * Whether `principal` may open one more session. Its own cap is checked first (429: the caller
 * itself can free a slot), then the server's (503). Never evicts: a session another client of
 * the same token is using is never closed to make room.
 *
 * @param who how the refusal names the principal (`the token of persona "ci"`), never the token.
 */
export function admitSession(
  sessions: Iterable<SessionUse>,
  principal: string,
  who: string,
  limits: SessionLimits,
  now = Date.now(),
): { ok: true } | SessionRefusal {
  let total = 0;
  const mine: SessionUse[] = [];
  for (const s of sessions) {
    total++;
    if (s.principal === principal) mine.push(s);
  }
  const idle = duration(limits.idleMs);
  if (mine.length >= limits.perPrincipal) {
    const wait = soonestExpiry(mine, limits, now);
    const when =
      wait === undefined
        ? `all of them have a request or stream open, so none expires while its client stays connected`
        : `the next one expires in about ${wait} s`;
    return {
      ok: false,
      status: 429,
      retryAfterS: wait ?? Math.ceil((limits.idleMs + limits.sweepMs) / 1000),
      message:
        `too many sessions for ${who}: ${mine.length} open, the cap is ${limits.perPrincipal} per principal ` +
        `(maxSessionsPerPrincipal, forge serve --max-sessions-per-principal). Free one: end a session you no longer ` +
        `use with DELETE /mcp and its mcp-session-id header (an MCP client's terminateSession), or wait: a session ` +
        `with no request or stream open is closed after ${idle} idle (sessionIdleMs); ${when}`,
    };
  }
  if (total >= limits.maxSessions) {
    return {
      ok: false,
      status: 503,
      retryAfterS: Math.ceil((limits.idleMs + limits.sweepMs) / 1000),
      message:
        `too many sessions on this server: ${total} open, the cap is ${limits.maxSessions} (maxSessions, ` +
        `forge serve --max-sessions); other principals hold them. Retry later: a session with nothing open is ` +
        `closed after ${idle} idle; an operator can raise maxSessions or lower maxSessionsPerPrincipal`,
    };
  }
  return { ok: true };
}

/** Seconds until the first idle one of `mine` is swept, or undefined when none is idle. */
function soonestExpiry(mine: SessionUse[], limits: SessionLimits, now: number): number | undefined {
  let soonest: number | undefined;
  for (const s of mine) {
    if (s.open > 0) continue;
    const left = Math.max(0, limits.idleMs - (now - s.lastSeen)) + limits.sweepMs;
    soonest = soonest === undefined ? left : Math.min(soonest, left);
  }
  return soonest === undefined ? undefined : Math.max(1, Math.ceil(soonest / 1000));
}

/** `300 ms`, `1.5 s`, `30 min`. */
function duration(ms: number): string {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60_000) return `${Math.round(ms / 100) / 10} s`;
  return `${Math.round(ms / 6000) / 10} min`;
}
