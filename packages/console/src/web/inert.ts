import { inertText } from '@forge/registry/inert';

/**
 * Every string of a value the API answered, made inert: control, bidi and invisible characters
 * shown as escapes (forge's one rule, `inertText`). The page reads the API only through
 * `api.ts`, which applies this to each answer, so no page can show agent-, tool- or
 * upstream-written text any other way; and the page renders text as text (never as HTML).
 */
export function inertDeep<T>(v: T): T {
  if (typeof v === 'string') return inertText(v) as T;
  if (Array.isArray(v)) return v.map(inertDeep) as T;
  if (v && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[inertText(k)] = inertDeep(x);
    return out as T;
  }
  return v;
}

export { inertText };
