/**
 * Allow-rules: the grammar (every way a line is refused, with the message and line number), and
 * matching (exact rules only: no prefixes, globs or inheritance).
 */
import { describe, expect, it } from 'vitest';
import { parseRules, RULE_CLASSES, type RuleClass, type RulesProblem, ruleAllows, subjectOf } from '../src/index.js';
import { rulesOf } from './helpers.js';

/** The refusal of `text` (fails the test when it parses). */
function problem(text: string, file = 'policy.rules'): RulesProblem {
  const r = parseRules(text, file);
  if (r.ok) throw new Error(`expected a refusal of ${JSON.stringify(text)}`);
  return r.problem;
}

const message = (line: string) => problem(line).message;

describe('parseRules: accepted files', () => {
  it('reads rules, skipping comments and blank lines, and counts distinct rules', () => {
    const r = parseRules(
      [
        '# who may do what',
        '',
        'allow coder_t tool:code.fib execute',
        '   # an indented comment',
        '\t',
        '  allow   reviewer_t\tshared:notes   read  ',
        'allow coder_t tool:code.fib execute',
      ].join('\n'),
      '.forge/policy.rules',
    );
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.rules.file).toBe('.forge/policy.rules');
    expect(r.rules.size).toBe(2);
    expect(Object.isFrozen(r.rules)).toBe(true);
    expect(ruleAllows(r.rules, 'coder_t', 'tool', 'code.fib', 'execute')).toBe(true);
    expect(ruleAllows(r.rules, 'reviewer_t', 'shared', 'notes', 'read')).toBe(true);
  });

  it('accepts an empty file and a file of comments (no rules: everything denied)', () => {
    for (const text of ['', '\n\n', '# nothing yet\n', '\r\n# c\r\n']) {
      const r = parseRules(text, 'policy.rules');
      expect(r.ok && r.rules.size).toBe(0);
    }
  });

  it('accepts CRLF line endings', () => {
    const rules = rulesOf('# windows\r\nallow coder_t tool:fib execute\r\n\r\nallow coder_t network:default connect\r\n');
    expect(rules.size).toBe(2);
    expect(ruleAllows(rules, 'coder_t', 'tool', 'fib', 'execute')).toBe(true);
    expect(ruleAllows(rules, 'coder_t', 'network', 'default', 'connect')).toBe(true);
  });

  it('accepts every class with every one of its permissions, and nothing else', () => {
    expect(RULE_CLASSES).toEqual({
      tool: ['execute'],
      model: ['use'],
      shared: ['read', 'write'],
      session: ['read', 'write', 'resume'],
      mount: ['read', 'write'],
      agent: ['create', 'start', 'stop', 'read', 'write'],
      network: ['connect'],
    });
    const lines: string[] = [];
    for (const [cls, perms] of Object.entries(RULE_CLASSES)) {
      for (const perm of perms) lines.push(`allow p_t ${cls}:${cls === 'network' ? 'default' : 'x'} ${perm}`);
    }
    const rules = rulesOf(lines.join('\n'));
    expect(rules.size).toBe(15);
    for (const [cls, perms] of Object.entries(RULE_CLASSES)) {
      for (const perm of perms) {
        expect(ruleAllows(rules, 'p_t', cls as RuleClass, cls === 'network' ? 'default' : 'x', perm)).toBe(true);
      }
    }
  });

  it('accepts names with the characters tools, mounts and models use', () => {
    const rules = rulesOf(
      [
        'allow a_t tool:code.fib-2_x execute',
        'allow a_t model:claude-3@latest use',
        'allow a_t mount:/srv/data+x read',
        'allow A-b_t agent:a:b create',
      ].join('\n'),
    );
    expect(ruleAllows(rules, 'a_t', 'tool', 'code.fib-2_x', 'execute')).toBe(true);
    expect(ruleAllows(rules, 'a_t', 'model', 'claude-3@latest', 'use')).toBe(true);
    expect(ruleAllows(rules, 'a_t', 'mount', '/srv/data+x', 'read')).toBe(true);
    expect(ruleAllows(rules, 'A-b_t', 'agent', 'a:b', 'create')).toBe(true);
  });
});

describe('parseRules: every refusal names the file, the line and the fix', () => {
  it('refuses an unknown permission for each class, listing that class’s permissions', () => {
    const text = ['# rules', '', 'allow coder_t tool:fib execute', '', '', '', 'allow coder_t tool:fib exec'].join('\n');
    expect(problem(text)).toEqual({
      file: 'policy.rules',
      line: 7,
      reason: 'unknown permission "exec" for class tool (expected: execute)',
      message: 'policy.rules:7: unknown permission "exec" for class tool (expected: execute)',
    });
    expect(message('allow a_t model:m execute')).toMatchInlineSnapshot(
      `"policy.rules:1: unknown permission "execute" for class model (expected: use)"`,
    );
    expect(message('allow a_t shared:s execute')).toMatchInlineSnapshot(
      `"policy.rules:1: unknown permission "execute" for class shared (expected: read, write)"`,
    );
    expect(message('allow a_t session:s delete')).toMatchInlineSnapshot(
      `"policy.rules:1: unknown permission "delete" for class session (expected: read, write, resume)"`,
    );
    expect(message('allow a_t mount:m execute')).toMatchInlineSnapshot(
      `"policy.rules:1: unknown permission "execute" for class mount (expected: read, write)"`,
    );
    expect(message('allow a_t agent:a kill')).toMatchInlineSnapshot(
      `"policy.rules:1: unknown permission "kill" for class agent (expected: create, start, stop, read, write)"`,
    );
    expect(message('allow a_t network:default listen')).toMatchInlineSnapshot(
      `"policy.rules:1: unknown permission "listen" for class network (expected: connect)"`,
    );
    expect(message('allow a_t tool:fib EXECUTE')).toMatchInlineSnapshot(
      `"policy.rules:1: unknown permission "EXECUTE" for class tool (expected: execute)"`,
    );
  });

  it('refuses an unknown class', () => {
    expect(message('allow a_t file:x read')).toMatchInlineSnapshot(
      `"policy.rules:1: unknown class "file" (expected one of: tool, model, shared, session, mount, agent, network)"`,
    );
    expect(message('allow a_t Tool:x execute')).toMatchInlineSnapshot(
      `"policy.rules:1: unknown class "Tool" (expected one of: tool, model, shared, session, mount, agent, network)"`,
    );
    expect(message('allow a_t __proto__:x read')).toMatchInlineSnapshot(
      `"policy.rules:1: unknown class "__proto__" (expected one of: tool, model, shared, session, mount, agent, network)"`,
    );
    expect(message('allow a_t toString:x read')).toMatchInlineSnapshot(
      `"policy.rules:1: unknown class "toString" (expected one of: tool, model, shared, session, mount, agent, network)"`,
    );
  });

  it('refuses a wrong number of words', () => {
    expect(message('allow')).toMatchInlineSnapshot(
      `"policy.rules:1: expected "allow <subject_type> <class>:<name> <permission>" (4 words), found 1"`,
    );
    expect(message('allow coder_t tool:fib')).toMatchInlineSnapshot(
      `"policy.rules:1: expected "allow <subject_type> <class>:<name> <permission>" (4 words), found 3"`,
    );
    expect(message('allow coder_t tool:fib execute now')).toMatchInlineSnapshot(
      `"policy.rules:1: expected "allow <subject_type> <class>:<name> <permission>" (4 words), found 5"`,
    );
    // A comment is a whole line; after a rule it is more words.
    expect(problem('allow coder_t tool:fib execute # fib').reason).toMatch(/\(4 words\), found 6$/);
  });

  it('refuses deny and neverallow lines: there are no deny rules', () => {
    expect(message('deny coder_t tool:fib execute')).toMatchInlineSnapshot(
      `"policy.rules:1: "deny" rules do not exist: everything not allowed is denied, so remove the line"`,
    );
    expect(message('neverallow coder_t tool:fib execute')).toMatchInlineSnapshot(
      `"policy.rules:1: "neverallow" rules do not exist: everything not allowed is denied, so remove the line"`,
    );
  });

  it('refuses a line that does not start with allow', () => {
    expect(message('permit coder_t tool:fib execute')).toMatchInlineSnapshot(
      `"policy.rules:1: expected "allow <subject_type> <class>:<name> <permission>", found "permit""`,
    );
    expect(message('Allow coder_t tool:fib execute')).toMatchInlineSnapshot(
      `"policy.rules:1: expected "allow <subject_type> <class>:<name> <permission>", found "Allow""`,
    );
    expect(message('coder_t tool:fib execute')).toMatchInlineSnapshot(
      `"policy.rules:1: expected "allow <subject_type> <class>:<name> <permission>", found "coder_t""`,
    );
    expect(message('; allow coder_t tool:fib execute')).toMatchInlineSnapshot(
      `"policy.rules:1: expected "allow <subject_type> <class>:<name> <permission>", found ";""`,
    );
  });

  it('refuses a subject type that is not <persona>_t', () => {
    expect(message('allow coder tool:fib execute')).toMatchInlineSnapshot(
      `"policy.rules:1: subject type "coder" must be a persona name followed by _t (for example coder_t)"`,
    );
    for (const subject of ['_t', 't', '9coder_t', 'coder_T', 'co.der_t', 'coder_t_', '*_t']) {
      expect(problem(`allow ${subject} tool:fib execute`).reason).toBe(
        `subject type "${subject}" must be a persona name followed by _t (for example coder_t)`,
      );
    }
  });

  it('refuses an object without a class', () => {
    expect(message('allow coder_t fib execute')).toMatchInlineSnapshot(
      `"policy.rules:1: object "fib" must be <class>:<name> (for example tool:fib)"`,
    );
    expect(message('allow coder_t :fib execute')).toMatchInlineSnapshot(
      `"policy.rules:1: object ":fib" must be <class>:<name> (for example tool:fib)"`,
    );
  });

  it('refuses an object with an empty name', () => {
    expect(message('allow coder_t tool: execute')).toMatchInlineSnapshot(`"policy.rules:1: object "tool:" has no name after "tool:""`);
    expect(message('allow coder_t network: connect')).toMatchInlineSnapshot(
      `"policy.rules:1: object "network:" has no name after "network:""`,
    );
  });

  it('refuses globs in names', () => {
    expect(message('allow coder_t tool:* execute')).toMatchInlineSnapshot(
      `"policy.rules:1: "tool:*": globs are not allowed; write one rule per name"`,
    );
    expect(message('allow coder_t tool:code.* execute')).toMatchInlineSnapshot(
      `"policy.rules:1: "tool:code.*": globs are not allowed; write one rule per name"`,
    );
    expect(message('allow coder_t tool:f?b execute')).toMatchInlineSnapshot(
      `"policy.rules:1: "tool:f?b": globs are not allowed; write one rule per name"`,
    );
    for (const name of ['[ab]', 'a{b,c}', 'x]']) {
      expect(problem(`allow coder_t tool:${name} execute`).reason).toBe(`"tool:${name}": globs are not allowed; write one rule per name`);
    }
  });

  it('refuses names with characters no name has', () => {
    expect(message('allow coder_t tool:fi%b execute')).toMatchInlineSnapshot(
      `"policy.rules:1: "tool:fi%b": the name has characters a tool name cannot have"`,
    );
    expect(message('allow coder_t mount:~/x read')).toMatchInlineSnapshot(
      `"policy.rules:1: "mount:~/x": the name has characters a mount name cannot have"`,
    );
  });

  it('refuses a network object other than default', () => {
    expect(message('allow coder_t network:internet connect')).toMatchInlineSnapshot(
      `"policy.rules:1: unknown network object "internet" (expected: default)"`,
    );
    expect(message('allow coder_t network:Default connect')).toMatchInlineSnapshot(
      `"policy.rules:1: unknown network object "Default" (expected: default)"`,
    );
  });

  it('one bad line rejects the whole file, naming that line', () => {
    const text = 'allow a_t tool:x execute\r\n# c\r\n\r\nallow a_t tool:y execute\r\nallow a_t tool:z run\r\nallow a_t tool:w execute\r\n';
    expect(problem(text, '/p/.forge/policy.rules')).toEqual({
      file: '/p/.forge/policy.rules',
      line: 5,
      reason: 'unknown permission "run" for class tool (expected: execute)',
      message: '/p/.forge/policy.rules:5: unknown permission "run" for class tool (expected: execute)',
    });
    // The first bad line is the one reported.
    expect(problem('allow a_t tool:x execute\ndeny a_t tool:x execute\nallow a_t tool:* execute').line).toBe(2);
  });
});

describe('ruleAllows: exact rules only', () => {
  const rules = rulesOf(
    [
      'allow coder_t tool:code.fib execute',
      'allow coder_t shared:notes write',
      'allow coder_t agent:helper create',
      'allow coder_t network:default connect',
    ].join('\n'),
  );

  it('allows exactly what a rule says', () => {
    expect(ruleAllows(rules, 'coder_t', 'tool', 'code.fib', 'execute')).toBe(true);
    expect(ruleAllows(rules, 'coder_t', 'shared', 'notes', 'write')).toBe(true);
  });

  it('does not match by prefix, suffix or glob', () => {
    for (const name of ['code.fi', 'code.fibo', 'code', 'code.*', '*', 'code.fi?', 'CODE.FIB', ' code.fib']) {
      expect(ruleAllows(rules, 'coder_t', 'tool', name, 'execute')).toBe(false);
    }
  });

  it('does not carry a rule to another subject, class or permission', () => {
    expect(ruleAllows(rules, 'coder2_t', 'tool', 'code.fib', 'execute')).toBe(false);
    expect(ruleAllows(rules, 'code_t', 'tool', 'code.fib', 'execute')).toBe(false);
    expect(ruleAllows(rules, 'coder', 'tool', 'code.fib', 'execute')).toBe(false);
    expect(ruleAllows(rules, 'coder_t', 'model', 'code.fib', 'use')).toBe(false);
    // write does not imply read, create does not imply start.
    expect(ruleAllows(rules, 'coder_t', 'shared', 'notes', 'read')).toBe(false);
    expect(ruleAllows(rules, 'coder_t', 'agent', 'helper', 'start')).toBe(false);
    expect(ruleAllows(rules, 'coder_t', 'mount', 'notes', 'write')).toBe(false);
  });

  it('subjectOf maps a persona to its subject type', () => {
    expect(subjectOf('coder')).toBe('coder_t');
    expect(ruleAllows(rules, subjectOf('coder'), 'network', 'default', 'connect')).toBe(true);
  });
});
