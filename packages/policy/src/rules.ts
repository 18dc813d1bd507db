/**
 * Allow-rules: an optional `policy.rules` file of lines
 *
 *     allow <subject_type> <class>:<name> <permission>
 *
 * Default deny, allow only: no deny rules, no globs, no inheritance, no variables. Classes and
 * their permissions are a fixed set; an unknown one is an error, and one bad line rejects the
 * whole file. Blank lines and lines starting with `#` are ignored. A persona `p` is the subject
 * type `p_t`.
 */

/** Each class and the permissions it has. */
export const RULE_CLASSES = {
  tool: ['execute'],
  model: ['use'],
  shared: ['read', 'write'],
  session: ['read', 'write', 'resume'],
  mount: ['read', 'write'],
  agent: ['create', 'start', 'stop', 'read', 'write'],
  network: ['connect'],
} as const satisfies Record<string, readonly string[]>;

export type RuleClass = keyof typeof RULE_CLASSES;

/** A parsed rules file. */
export interface AllowRules {
  readonly file: string;
  /** How many distinct rules it holds. */
  readonly size: number;
  /** @internal `subject\0class\0name\0permission` keys. */
  readonly keys: ReadonlySet<string>;
}

export interface RulesProblem {
  file: string;
  line: number;
  reason: string;
  /** `file:line: reason`, e.g. `policy.rules:7: unknown permission "exec" for class tool (expected: execute)`. */
  message: string;
}

export type RulesResult = { ok: true; rules: AllowRules } | { ok: false; problem: RulesProblem };

const SUBJECT = /^[A-Za-z][A-Za-z0-9_-]*_t$/;
const OBJECT_NAME = /^[A-Za-z0-9_./@:+-]+$/;

/** Parses a rules file. `file` is used in messages (pass the name as the operator knows it). */
export function parseRules(text: string, file: string): RulesResult {
  const keys = new Set<string>();
  const lines = text.split('\n');
  for (let n = 0; n < lines.length; n++) {
    const raw = (lines[n] as string).replace(/\r$/, '');
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const fail = (reason: string): RulesResult => ({
      ok: false,
      problem: { file, line: n + 1, reason, message: `${file}:${n + 1}: ${reason}` },
    });
    const words = line.split(/\s+/);
    if (words[0] !== 'allow') {
      if (words[0] === 'deny' || words[0] === 'neverallow')
        return fail(`"${words[0]}" rules do not exist: everything not allowed is denied, so remove the line`);
      return fail(`expected "allow <subject_type> <class>:<name> <permission>", found "${words[0]}"`);
    }
    if (words.length !== 4) return fail(`expected "allow <subject_type> <class>:<name> <permission>" (4 words), found ${words.length}`);
    const [, subject, object, permission] = words as [string, string, string, string];
    if (!SUBJECT.test(subject)) return fail(`subject type "${subject}" must be a persona name followed by _t (for example coder_t)`);
    const colon = object.indexOf(':');
    if (colon <= 0) return fail(`object "${object}" must be <class>:<name> (for example tool:fib)`);
    const cls = object.slice(0, colon);
    const name = object.slice(colon + 1);
    if (!Object.hasOwn(RULE_CLASSES, cls)) return fail(`unknown class "${cls}" (expected one of: ${Object.keys(RULE_CLASSES).join(', ')})`);
    const perms: readonly string[] = RULE_CLASSES[cls as RuleClass];
    if (!perms.includes(permission)) return fail(`unknown permission "${permission}" for class ${cls} (expected: ${perms.join(', ')})`);
    if (name === '') return fail(`object "${object}" has no name after "${cls}:"`);
    if (/[*?[\]{}]/.test(name)) return fail(`"${object}": globs are not allowed; write one rule per name`);
    if (!OBJECT_NAME.test(name)) return fail(`"${object}": the name has characters a ${cls} name cannot have`);
    if (cls === 'network' && name !== 'default') return fail(`unknown network object "${name}" (expected: default)`);
    keys.add(`${subject}\0${cls}\0${name}\0${permission}`);
  }
  return { ok: true, rules: Object.freeze({ file, size: keys.size, keys }) };
}

/** Whether `rules` hold `allow <subject> <cls>:<name> <permission>` exactly. */
export function ruleAllows(rules: AllowRules, subject: string, cls: RuleClass, name: string, permission: string): boolean {
  return rules.keys.has(`${subject}\0${cls}\0${name}\0${permission}`);
}

/** The subject type of a persona: `coder` → `coder_t`. */
export function subjectOf(persona: string): string {
  return `${persona}_t`;
}
