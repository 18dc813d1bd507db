import type { RefusalView } from '../views.js';
import { inertDeep } from './inert.js';
import type { Bytes } from './verify.js';

/** The session: who the console acts as, and the CSRF token every change carries. */
export interface SessionView {
  operator: string;
  csrf: string;
  version: string;
}

let session: Promise<SessionView> | undefined;

/** An API answer that is a refusal, thrown: its message says what to do. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly refusal: RefusalView,
  ) {
    super(refusal.message);
  }
}

async function answer<T>(res: Response): Promise<T> {
  const text = await res.text();
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    v = { ok: false, kind: 'internal', message: text || `HTTP ${res.status}` };
  }
  // Inert before anything reads it: this is the page's only way to the API.
  const safe = inertDeep(v);
  if (!res.ok) throw new ApiError(res.status, safe as RefusalView);
  return safe as T;
}

/** GET `path` of the API. */
export async function get<T>(path: string, params: Record<string, string | number | undefined> = {}): Promise<T> {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== '') q.set(k, String(v));
  const s = q.toString();
  return answer<T>(await fetch(`/api/${path}${s ? `?${s}` : ''}`, { credentials: 'same-origin' }));
}

/** The session, read once. */
export function currentSession(): Promise<SessionView> {
  session ??= get<SessionView>('session');
  return session;
}

/** POST `body` to `path`, with the session's CSRF token. */
export async function post<T>(path: string, body: unknown): Promise<T> {
  const { csrf } = await currentSession();
  return answer<T>(
    await fetch(`/api/${path}`, {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'content-type': 'application/json', 'x-forge-csrf': csrf },
      body: JSON.stringify(body),
    }),
  );
}

/** One of the log's files as the server answers it (undefined when it does not exist); a refusal throws, saying why. */
async function rawFile(name: string): Promise<Response | undefined> {
  const res = await fetch(`/api/audit/raw/${encodeURIComponent(name)}`, { credentials: 'same-origin' });
  if (res.status === 404) return undefined;
  if (!res.ok || !res.body) {
    const why = await answer<never>(res).catch((e: Error) => e.message);
    throw new Error(`reading ${name} failed: ${why}`);
  }
  return res;
}

/** The raw bytes of one of the log's files (for the verifier: never made inert, never decoded). */
export async function rawBytes(name: string): Promise<Bytes | undefined> {
  const res = await rawFile(name);
  return res && new Uint8Array(await res.arrayBuffer());
}

/** Follows the server-sent events `event` of `path`; each message's JSON made inert before `on` sees it. Returns the stop. */
export function follow<T>(path: string, event: string, on: (value: T) => void): () => void {
  const es = new EventSource(`/api/${path}`);
  es.addEventListener(event, (ev) => on(inertDeep(JSON.parse((ev as MessageEvent<string>).data) as T)));
  return () => es.close();
}

/** One of the log's files as its bytes arrive (for the verifier: a segment is never held whole). */
export async function rawStream(name: string): Promise<AsyncIterable<Bytes> | undefined> {
  const reader = (await rawFile(name))?.body?.getReader();
  if (!reader) return undefined;
  return {
    async *[Symbol.asyncIterator]() {
      try {
        for (let r = await reader.read(); !r.done; r = await reader.read()) yield r.value as Bytes;
      } finally {
        reader.releaseLock();
      }
    },
  };
}
