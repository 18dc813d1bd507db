import { toolNameProblem } from '@forge/registry';

/** Longest capability text accepted, in characters. */
const MAX_CAPABILITY = 200;
/** Longest slug, in characters (dots included). */
const MAX_SLUG = 48;
/** Most dot-separated segments a capability may have. */
const MAX_SEGMENTS = 4;

type NamingFailure = { ok: false; kind: 'validation_failed'; message: string };

function refuse(message: string): NamingFailure {
  return { ok: false, kind: 'validation_failed', message };
}

/**
 * The normalised form of a capability, used as the gap signature and the tool's base name.
 * Dots separate segments; each segment is lower-cased, every run of characters outside
 * `[a-z0-9]` becomes `_`, and leading/trailing `_` are trimmed: `"CSV: filter rows"` →
 * `csv_filter_rows`, `"text.Word Count"` → `text.word_count`. Refused (`validation_failed`, the
 * message naming the capability and what to change) when the input is not a string, is longer
 * than 200 characters, has more than 4 segments or an empty one, a segment does not start with a
 * letter, or the slug is longer than 48 characters. Pure; never throws.
 */
export function capabilitySlug(capability: string): { ok: true; slug: string } | NamingFailure {
  if (typeof capability !== 'string') return refuse(`capability must be a string (got ${typeof capability})`);
  const shown = JSON.stringify(capability.length > 60 ? `${capability.slice(0, 60)}…` : capability);
  if (capability.length > MAX_CAPABILITY) {
    return refuse(
      `capability ${shown} is ${capability.length} characters; use at most ${MAX_CAPABILITY} (a short name such as "csv.filter_rows", and put the detail in the description)`,
    );
  }
  const raw = capability.split('.');
  if (raw.length > MAX_SEGMENTS) {
    return refuse(`capability ${shown} has ${raw.length} dot-separated segments; use at most ${MAX_SEGMENTS}`);
  }
  const segments: string[] = [];
  for (const [i, part] of raw.entries()) {
    const seg = part
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '_')
      .replace(/^_+|_+$/g, '');
    if (seg === '') {
      return refuse(
        `capability ${shown}: segment ${i + 1} is empty (nothing but dots, spaces or punctuation); give every dot-separated segment letters, e.g. "csv.filter_rows"`,
      );
    }
    if (!/^[a-z]/.test(seg)) {
      return refuse(`capability ${shown}: segment ${i + 1} ("${seg}") must start with a letter; reword it, e.g. "v2 parse" → "parse_v2"`);
    }
    segments.push(seg);
  }
  const slug = segments.join('.');
  if (slug.length > MAX_SLUG) {
    return refuse(
      `capability ${shown} gives the name "${slug}" (${slug.length} characters); use a shorter capability (at most ${MAX_SLUG} characters once normalised)`,
    );
  }
  return { ok: true, slug };
}

/**
 * The tool name forge derives for a capability's slug: `${namespace}.${slug}` when the persona's
 * policy entry gives a namespace, else the slug itself. Refused (`validation_failed`) when the
 * result is not a valid forge tool name (`toolNameProblem`: 1–64 bytes of `[A-Za-z0-9_.-]`,
 * starting with a letter, no `..`, no trailing `.`); the message says how long it is and to use a
 * shorter capability. Pure; never throws.
 */
export function deriveToolName(slug: string, namespace: string | undefined): { ok: true; name: string } | NamingFailure {
  if (typeof slug !== 'string' || slug === '') return refuse('the capability slug must be a non-empty string (use capabilitySlug first)');
  const name = namespace === undefined || namespace === '' ? slug : `${namespace}.${slug}`;
  const problem = toolNameProblem(name);
  if (problem === undefined) return { ok: true, name };
  const where = namespace ? ` (namespace "${namespace}" + capability "${slug}")` : ` (capability "${slug}")`;
  return refuse(
    `the tool name "${name}"${where} is ${name.length} characters and ${problem}; use a shorter capability${namespace ? ' or ask the operator for a shorter namespace' : ''}`,
  );
}
