/**
 * One call as its audit entry records it: what the console's runs page and `forge tools log` list.
 * A module of its own (`@forge/console/calls`), with nothing else in it, so a command can read
 * call entries without loading the console.
 */

/** One call as its audit entry records it (the runs page's row). */
export interface CallView {
  seq: number;
  ts: string;
  type: string;
  name: string;
  persona: string;
  ok: boolean;
  /** `ok`, or the error kind. */
  outcome: string;
  duration_ms?: number;
  run_id?: string;
  cache?: string;
}

/** The call row of an entry's fields (`forge.called` or `<source>.called` with a tool name), or undefined for any other entry. */
export function callRow(seq: number, ts: string, type: string, data: unknown): CallView | undefined {
  if (!type.endsWith('.called') || !data || typeof data !== 'object') return undefined;
  const d = data as Record<string, unknown>;
  if (typeof d.name !== 'string') return undefined;
  const ok = d.ok === true;
  return {
    seq,
    ts,
    type,
    name: d.name,
    persona: typeof d.persona === 'string' ? d.persona : '',
    ok,
    outcome: ok ? 'ok' : typeof d.kind === 'string' ? d.kind : 'failed',
    ...(typeof d.duration_ms === 'number' ? { duration_ms: d.duration_ms } : {}),
    ...(typeof d.run_id === 'string' ? { run_id: d.run_id } : {}),
    ...(typeof d.cache === 'string' ? { cache: d.cache } : {}),
  };
}
