import {
  isJSONRPCErrorResponse,
  isJSONRPCNotification,
  isJSONRPCRequest,
  isJSONRPCResultResponse,
  type Transport,
} from '@modelcontextprotocol/server';

/**
 * The default largest protocol message, in bytes, on both transports: a stdio line (without its
 * newline) and an HTTP request body. 16 MiB holds any tool input forge has a use for (inputs are
 * JSON; files go in by `x-bind`, not inline) with room for base64 payloads several MiB large,
 * and keeps one message's memory bounded: the line, its string and the parsed value together
 * stay well under 100 MB.
 */
export const DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024;
/** The highest limit accepted: a line past ~512 Mi characters cannot become one string in V8. */
export const MAX_MESSAGE_BYTES_CEILING = 256 * 1024 * 1024;

export type RequestId = string | number;

/** A JSON-RPC error answer (the SDK's types do not let `id` be null, which JSON-RPC requires when it is unknown). */
export interface ErrorAnswer {
  jsonrpc: '2.0';
  id: RequestId | null;
  error: { code: number; message: string; data?: unknown };
}

export const errorAnswer = (id: RequestId | null, code: number, message: string, data?: unknown): ErrorAnswer => ({
  jsonrpc: '2.0',
  id,
  error: data === undefined ? { code, message } : { code, message, data },
});

/** A parsed line: a JSON-RPC message to dispatch, or the error to answer it with. */
export type Checked = { ok: true; message: unknown } | { ok: false; answer: ErrorAnswer };

/**
 * Checks one JSON value as a JSON-RPC 2.0 message, as JSON-RPC wants it answered: `params`
 * that is neither absent nor an object gets -32602 (MCP takes params by name only), anything
 * else the SDK's schema refuses gets -32600; both with the request's id when it has a valid one,
 * else null.
 */
export function checkMessage(value: unknown): Checked {
  const bad = paramsNotObject(value);
  if (bad) return { ok: false, answer: bad };
  if (!(isJSONRPCRequest(value) || isJSONRPCNotification(value) || isJSONRPCResultResponse(value) || isJSONRPCErrorResponse(value)))
    return { ok: false, answer: errorAnswer(idOf(value), -32600, 'Invalid Request: not a JSON-RPC 2.0 message') };
  return { ok: true, message: value };
}

/** -32602 for a message whose `params` is present but not an object (a string, number, array, null); else undefined. */
export function paramsNotObject(value: unknown): ErrorAnswer | undefined {
  if (!isObject(value) || typeof value.method !== 'string' || value.params === undefined || isObject(value.params)) return undefined;
  return errorAnswer(
    idOf(value),
    -32602,
    `Invalid params: ${value.method} takes params as an object (by name), or none (got ${shown(value.params)})`,
  );
}

/**
 * Answers a `tools/call` or `tools/list` request with malformed params itself, with JSON-RPC
 * -32602 and a plain message naming the field, and says so (true). The SDK answers them with a
 * raw validation dump, a malformed tools/list as -32603 "internal error" (its schema check runs
 * before its own -32602 one; pinned in test/sdk-internals.test.ts). Every server built here runs
 * it on each incoming message.
 */
export function refuseMalformedParams(message: unknown, transport: Pick<Transport, 'send'>): boolean {
  const problem = paramsProblem(message as { id?: unknown; method?: unknown; params?: unknown });
  if (problem === undefined) return false;
  const id = (message as { id: string | number }).id;
  void transport.send({ jsonrpc: '2.0', id, error: { code: -32602, message: `Invalid params: ${problem}` } }).catch(() => {});
  return true;
}

/** Why a `tools/call` or `tools/list` request's params are malformed, or undefined. */
function paramsProblem(m: { id?: unknown; method?: unknown; params?: unknown }): string | undefined {
  if (m.id === undefined || (m.method !== 'tools/call' && m.method !== 'tools/list')) return undefined;
  const p = m.params as Record<string, unknown> | undefined;
  const isObject = (v: unknown) => v !== null && typeof v === 'object' && !Array.isArray(v);
  const got = (v: unknown) => (v === undefined ? 'nothing' : JSON.stringify(v).slice(0, 60));
  if (m.method === 'tools/call') {
    if (!isObject(p)) return `tools/call takes params {"name": "<tool>", "arguments": {…}} (got ${got(p)})`;
    if (typeof p?.name !== 'string') return `tools/call needs params.name, a tool name string (got ${got(p?.name)})`;
    if (p.arguments !== undefined && !isObject(p.arguments))
      return `tools/call params.arguments must be an object (got ${got(p.arguments)})`;
    return undefined;
  }
  if (p === undefined) return undefined;
  if (!isObject(p)) return `tools/list params must be an object (got ${got(p)})`;
  if (p.cursor !== undefined && typeof p.cursor !== 'string') return `tools/list params.cursor must be a string (got ${got(p.cursor)})`;
  return undefined;
}

/** A line that is not JSON: -32700, id null (none could be read). */
export const parseErrorAnswer = (): ErrorAnswer => errorAnswer(null, -32700, 'Parse error: the line is not JSON');

function idOf(value: unknown): RequestId | null {
  if (!isObject(value)) return null;
  return typeof value.id === 'string' || (typeof value.id === 'number' && Number.isFinite(value.id)) ? value.id : null;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const shown = (v: unknown): string => {
  const s = JSON.stringify(v) ?? String(v);
  return s.length > 60 ? `${s.slice(0, 60)}…` : s;
};

/**
 * The top-level `"id"` of a JSON object whose middle was never seen: read from `head` (its first
 * bytes) when a member `"id"` comes before the text ends, else from `tail` (its last bytes) when
 * `"id"` is its last member, as the MCP SDK writes requests (`{"method":…,"params":…,"jsonrpc":"2.0","id":7}`).
 * Null when neither shows it. Only a string or finite number counts.
 */
export function peekId(head: string, tail: string): RequestId | null {
  return idFromHead(head) ?? idFromTail(tail);
}

/** Walks the members of the top-level object until `"id"`, skipping values by depth; null when the text ends first. */
function idFromHead(s: string): RequestId | null {
  let i = skipWs(s, 0);
  if (s[i] !== '{') return null;
  i++;
  for (;;) {
    i = skipWs(s, i);
    if (s[i] === ',') i = skipWs(s, i + 1);
    if (s[i] !== '"') return null;
    const keyEnd = stringEnd(s, i);
    if (keyEnd < 0) return null;
    const key = s.slice(i, keyEnd + 1);
    i = skipWs(s, keyEnd + 1);
    if (s[i] !== ':') return null;
    i = skipWs(s, i + 1);
    const end = valueEnd(s, i);
    if (end < 0) return null;
    if (key === '"id"') return asId(s.slice(i, end));
    i = end;
  }
}

/** `…,"id":<value>}` at the very end: the value, when the text before it makes it a top-level member. */
function idFromTail(s: string): RequestId | null {
  const m = /[,{]\s*"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*\}\s*$/.exec(s);
  // In valid JSON a `"` right after `,` or `{` opens a key, never sits inside a string (it would
  // be escaped), and a value right before the last `}` is the top-level object's last member.
  return m?.[1] ? asId(m[1]) : null;
}

function asId(text: string): RequestId | null {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v)) ? v : null;
  } catch {
    return null;
  }
}

const skipWs = (s: string, i: number): number => {
  while (i < s.length && (s[i] === ' ' || s[i] === '\t' || s[i] === '\n' || s[i] === '\r')) i++;
  return i;
};

/** The index of the closing quote of the string opening at `i`, or -1 if it does not close in `s`. */
function stringEnd(s: string, i: number): number {
  for (let j = i + 1; j < s.length; j++) {
    if (s[j] === '\\') j++;
    else if (s[j] === '"') return j;
  }
  return -1;
}

/** The index just past the value starting at `i`, or -1 if it does not end in `s`. */
function valueEnd(s: string, i: number): number {
  if (s[i] === '"') {
    const e = stringEnd(s, i);
    return e < 0 ? -1 : e + 1;
  }
  if (s[i] === '{' || s[i] === '[') {
    let depth = 0;
    for (let j = i; j < s.length; j++) {
      const c = s[j];
      if (c === '"') {
        j = stringEnd(s, j);
        if (j < 0) return -1;
      } else if (c === '{' || c === '[') depth++;
      else if (c === '}' || c === ']') {
        depth--;
        if (depth === 0) return j + 1;
      }
    }
    return -1;
  }
  // A number or literal ends at a delimiter, which must be in the text (else it may go on).
  let j = i;
  while (j < s.length && !/[,}\]\s]/.test(s[j] as string)) j++;
  return j < s.length && j > i ? j : -1;
}
