import stableStringify from 'fast-json-stable-stringify';

/** The envelope fields `matchExpect` reads. */
export interface ExpectEnvelope {
  ok: boolean;
  data?: unknown;
  error?: { kind: string; message: string };
}

/** Longest verdict, in characters. */
const MAX_VERDICT = 300;
/** Longest rendering of one value inside a verdict. */
const MAX_VALUE = 80;

/** Canonical JSON text (keys sorted; `undefined` as absent), or undefined when not serialisable. */
function canonical(v: unknown): string | undefined {
  try {
    return stableStringify(v === undefined ? null : v);
  } catch {
    return undefined;
  }
}

/**
 * Whether `a` and `b` are the same JSON data: canonical JSON equality (key order ignored,
 * numbers compared as JSON numbers, so `-0` equals `0`). Used for determinism (same input, same
 * data twice). Values that cannot be serialised (cycles, BigInt) are never the same.
 */
export function sameData(a: unknown, b: unknown): boolean {
  const x = canonical(a);
  return x !== undefined && x === canonical(b);
}

function show(v: unknown): string {
  if (v === undefined) return 'nothing';
  const text = canonical(v) ?? String(v);
  return text.length > MAX_VALUE ? `${text.slice(0, MAX_VALUE - 1)}…` : text;
}

function kindOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

function escapeToken(t: string): string {
  return t.replaceAll('~', '~0').replaceAll('/', '~1');
}

/** The first difference between `want` and `got` as `pointer: expected …, got …`, or undefined. */
function firstDifference(want: unknown, got: unknown, pointer: string): string | undefined {
  if (sameData(want, got)) return undefined;
  const at = pointer === '' ? '/' : pointer;
  if (kindOf(want) !== kindOf(got)) return `${at}: expected ${show(want)}, got ${show(got)}`;
  if (Array.isArray(want) && Array.isArray(got)) {
    for (let i = 0; i < Math.min(want.length, got.length); i++) {
      const d = firstDifference(want[i], got[i], `${pointer}/${i}`);
      if (d) return d;
    }
    return `${at}: expected ${want.length} items, got ${got.length}`;
  }
  if (typeof want === 'object' && want !== null && typeof got === 'object' && got !== null) {
    const w = want as Record<string, unknown>;
    const g = got as Record<string, unknown>;
    for (const k of Object.keys(w).sort()) {
      if (!(k in g)) return `${pointer}/${escapeToken(k)}: expected ${show(w[k])}, got nothing (missing)`;
      const d = firstDifference(w[k], g[k], `${pointer}/${escapeToken(k)}`);
      if (d) return d;
    }
    for (const k of Object.keys(g).sort()) {
      if (!(k in w)) return `${pointer}/${escapeToken(k)}: not expected, got ${show(g[k])}`;
    }
  }
  return `${at}: expected ${show(want)}, got ${show(got)}`;
}

function bounded(verdict: string): string {
  return verdict.length > MAX_VERDICT ? `${verdict.slice(0, MAX_VERDICT - 1)}…` : verdict;
}

function describeError(env: ExpectEnvelope): string {
  const kind = env.error?.kind ?? 'unknown';
  const message = env.error?.message ?? '';
  return message ? `${kind}: ${message}` : kind;
}

/**
 * Compares a run's envelope with an example's `expect`:
 * - `expect` absent (`undefined`): the run must be ok;
 * - an object with a boolean `ok` key is an envelope subset: `ok` must match, then `data`
 *   (deep-equal) when given, then `error.kind` when given;
 * - anything else is the expected `data` of an ok envelope (deep-equal).
 * Deep-equal is canonical JSON equality (`sameData`). A mismatch's `verdict` names the first
 * difference at a JSON pointer (`/rows/1/name: expected "b", got "c"`, `expected ok, got error
 * timeout: …`), at most 300 characters. Pure; never throws.
 */
export function matchExpect(expect: unknown, envelope: ExpectEnvelope): { ok: true } | { ok: false; verdict: string } {
  const fail = (verdict: string) => ({ ok: false as const, verdict: bounded(verdict) });
  const isEnvelope =
    typeof expect === 'object' && expect !== null && !Array.isArray(expect) && typeof (expect as { ok?: unknown }).ok === 'boolean';
  const want = isEnvelope
    ? (expect as { ok: boolean; data?: unknown; error?: unknown })
    : { ok: true, ...(expect === undefined ? {} : { data: expect }) };
  if (want.ok && !envelope.ok) return fail(`expected ok, got error ${describeError(envelope)}`);
  if (!want.ok && envelope.ok) return fail(`expected an error, got ok with data ${show(envelope.data)}`);
  if ('data' in want && want.data !== undefined) {
    const d = firstDifference(want.data, envelope.data, '');
    if (d) return fail(d);
  }
  const wantKind = (want.error as { kind?: unknown } | undefined)?.kind;
  if (!want.ok && wantKind !== undefined && wantKind !== envelope.error?.kind) {
    return fail(`expected error ${show(wantKind)}, got error ${describeError(envelope)}`);
  }
  return { ok: true };
}
