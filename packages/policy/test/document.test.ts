/**
 * The policy document: parsing and validation (every refusal, with the message a user sees and
 * the line and column of the offending value), the merge of documents over the bundle defaults,
 * and the published JSON Schema.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_POLICY,
  type EffectivePolicy,
  mergePolicies,
  POLICY_SCHEMA,
  type PolicyDocument,
  type PolicyProblem,
  parsePolicyDocument,
} from '../src/index.js';

/** The refusal of `text` (fails the test when it parses). */
function problem(text: string, file = 'policy.json'): PolicyProblem {
  const r = parsePolicyDocument(text, file);
  if (r.ok) throw new Error(`expected a refusal of ${JSON.stringify(text)}`);
  return r.problem;
}

const message = (text: string) => problem(text).message;

/** The 1-based line and column of the first `needle` in `text`, counted independently of the parser. */
function where(text: string, needle: string, nth = 0): { line: number; column: number } {
  let at = -1;
  for (let k = 0; k <= nth; k++) at = text.indexOf(needle, at + 1);
  if (at < 0) throw new Error(`${needle} is not in the text`);
  const before = text.slice(0, at).split('\n');
  return { line: before.length, column: (before.at(-1)?.length ?? 0) + 1 };
}

/** Every key of the schema, each used at least once. */
const FULL = `{
  "$schema": "https://example.com/policy.schema.json",
  "forbidden_tool_names": ["rm_*", "sh?ll", "sys.exec-1"],
  "breakers": { "per_tool_rpm": 30, "per_session_forge_count": 10, "failure_threshold": 3, "cooldown_s": 20 },
  "persona_namespaces": { "coder": "code", "Re-viewer_2": "review.tools" },
  "operator_personas": ["ops", "Re-viewer_2"],
  "persona_sandbox_overrides": {
    "coder": {
      "network": "allow",
      "loopback": "deny",
      "private_networks": "deny",
      "allow_domains": ["pypi.org", "*.pythonhosted.org", "localhost"],
      "deny_domains": ["evil.example"],
      "allow_ports": [443, 1, 65535]
    }
  },
  "persona_secret_allow": { "coder": ["GITHUB_TOKEN", "_x1"], "reviewer": [] },
  "budgets": {
    "defaults": { "timeout_ms": 10000, "cpu_s": 5, "output_cap": 2048, "artifacts_bytes": 8192 },
    "ceilings": { "timeout_ms": 60000, "cpu_s": 60, "output_cap": 4096, "artifacts_bytes": 1048576 }
  },
  "bind_roots": ["/srv/data", "~", "~/cache", "\${project}", "\${project}/out"],
  "bind_allow": ["/srv/data/.git", "~/.bashrc", "\${project}/.vscode"],
  "runtimes": { "allow": ["python3.*", "deno"] },
  "toolsmith": {
    "enabled": true,
    "paused": false,
    "mode": { "*": "governed", "coder": "direct" },
    "gap_recurrence_threshold": 2,
    "gap_window_hours": 48,
    "capability_allow": ["text.*", "csv_?"],
    "approvers": ["alice"],
    "approve_in_client": true,
    "cycle_interval_seconds": 600,
    "gap_store_max": 5000
  },
  "hooks": { "project": true },
  "secret_delivery": {
    "GITHUB_TOKEN": { "inject": { "hosts": ["api.github.com", "10.0.0.7"], "headers": ["Authorization"], "format": "Bearer {}" } },
    "DB_PASSWORD": "env"
  }
}
`;

describe('parsePolicyDocument: valid documents', () => {
  it('accepts {} as the empty policy', () => {
    expect(parsePolicyDocument('{}', 'policy.json')).toEqual({ ok: true, value: {} });
    expect(parsePolicyDocument('\n  {  }\n\n', 'policy.json')).toEqual({ ok: true, value: {} });
  });

  it('accepts a document using every key, returning it as written', () => {
    const r = parsePolicyDocument(FULL, 'policy.json');
    expect(r).toEqual({ ok: true, value: JSON.parse(FULL) });
    const keys = Object.keys((POLICY_SCHEMA as { properties: object }).properties);
    expect(Object.keys(JSON.parse(FULL)).sort()).toEqual([...keys].sort());
  });

  it('accepts a UTF-8 byte order mark, counting columns from after it', () => {
    expect(parsePolicyDocument('\uFEFF{"breakers":{"per_tool_rpm":5}}', 'policy.json')).toEqual({
      ok: true,
      value: { breakers: { per_tool_rpm: 5 } },
    });
    const p = problem('\uFEFF{"breakers":{"per_tool_rpm":0}}');
    expect(p.message).toMatchInlineSnapshot(`"policy.json:1:29: breakers.per_tool_rpm must be a positive integer (got 0)"`);
    expect([p.line, p.column]).toEqual([1, 29]);
  });

  it('accepts the boundaries of every numeric rule', () => {
    const doc = {
      breakers: { per_tool_rpm: 1, per_session_forge_count: 1, failure_threshold: 1, cooldown_s: 1 },
      persona_sandbox_overrides: { a: { allow_ports: [1, 65535] } },
      budgets: {
        defaults: { timeout_ms: 100, cpu_s: 1, output_cap: 1024, artifacts_bytes: 4096 },
        ceilings: { timeout_ms: 100, cpu_s: 1, output_cap: 1024, artifacts_bytes: 4096 },
      },
    };
    expect(parsePolicyDocument(JSON.stringify(doc), 'p.json')).toEqual({ ok: true, value: doc });
  });

  it('accepts a persona name of 64 characters and a namespace of 63', () => {
    const doc = { persona_namespaces: { [`a${'b'.repeat(63)}`]: `n${'s'.repeat(62)}` } };
    expect(parsePolicyDocument(JSON.stringify(doc), 'p.json')).toEqual({ ok: true, value: doc });
  });

  it('accepts defaults equal to the ceilings, and a default above the bundle ceiling when the document sets none', () => {
    const eq = { budgets: { defaults: { cpu_s: 10 }, ceilings: { cpu_s: 10 } } };
    expect(parsePolicyDocument(JSON.stringify(eq), 'p.json')).toEqual({ ok: true, value: eq });
    // Only the document's own pair is compared here; the merge lowers it to the ceiling in force.
    const high = { budgets: { defaults: { cpu_s: 1000 } } };
    expect(parsePolicyDocument(JSON.stringify(high), 'p.json')).toEqual({ ok: true, value: high });
  });
});

describe('parsePolicyDocument: syntax errors name the file, line and column', () => {
  it('refuses an empty file (and one of whitespace only), saying what to write', () => {
    expect(problem('', 'home/policy.json')).toEqual({
      file: 'home/policy.json',
      line: 1,
      column: 1,
      reason: 'the file is empty; write {} for an empty policy',
      message: 'home/policy.json:1:1: the file is empty; write {} for an empty policy',
    });
    expect(message(' \n\t\n')).toMatchInlineSnapshot(`"policy.json:1:1: the file is empty; write {} for an empty policy"`);
  });

  it('refuses a trailing comma in an object, at the closing brace', () => {
    const text = '{\n  "breakers": {\n    "per_tool_rpm": 5,\n  }\n}\n';
    const p = problem(text);
    expect(p).toEqual({ file: 'policy.json', ...where(text, '}'), reason: expect.any(String), message: expect.any(String) });
    expect(p.message).toMatchInlineSnapshot(`"policy.json:4:3: not valid JSON: trailing comma before "}""`);
  });

  it('refuses a trailing comma in an array, at the closing bracket', () => {
    const text = '{\n  "bind_roots": [\n    "/srv",\n  ]\n}';
    const p = problem(text);
    expect([p.line, p.column]).toEqual([4, 3]);
    expect(p.message).toMatchInlineSnapshot(`"policy.json:4:3: not valid JSON: trailing comma before "]""`);
  });

  it('refuses a duplicate key, at the second occurrence', () => {
    const text = '{\n  "breakers": { "per_tool_rpm": 5 },\n  "bind_roots": [],\n  "breakers": {}\n}';
    const p = problem(text);
    expect([p.line, p.column]).toEqual([4, 3]);
    expect(p.message).toMatchInlineSnapshot(`"policy.json:4:3: not valid JSON: duplicate key "breakers""`);
    expect(message('{"breakers":{"cooldown_s":1,"cooldown_s":2}}')).toMatchInlineSnapshot(
      `"policy.json:1:29: not valid JSON: duplicate key "cooldown_s""`,
    );
  });

  it('refuses an unterminated string: at its opening quote at the end of the file, at the line break before', () => {
    const p = problem('{\n  "bind_roots": ["/srv');
    expect([p.line, p.column]).toEqual([2, 18]);
    expect(p.message).toMatchInlineSnapshot(`"policy.json:2:18: not valid JSON: unterminated string"`);
    // A string cannot span lines: the raw line feed is where it went wrong.
    expect(message('{\n  "bind_roots": ["/srv\n]}')).toMatchInlineSnapshot(
      `"policy.json:2:23: not valid JSON: control character in a string (escape it, e.g. \\n)"`,
    );
    expect(message('{"bind_roots": ["/s\trv"]}')).toMatchInlineSnapshot(
      `"policy.json:1:20: not valid JSON: control character in a string (escape it, e.g. \\n)"`,
    );
  });

  it('refuses a bad escape, at the backslash', () => {
    const text = '{\n  "bind_roots": ["C:\\data"]\n}';
    const p = problem(text);
    expect([p.line, p.column]).toEqual([2, 21]);
    expect(p.message).toMatchInlineSnapshot(`"policy.json:2:21: not valid JSON: invalid escape "\\\\d" in a string"`);
    expect(message('{"a":"\\u12G4"}')).toMatchInlineSnapshot(`"policy.json:1:7: not valid JSON: invalid escape "\\\\u" in a string"`);
  });

  it('refuses text after the document', () => {
    const text = '{\n  "bind_roots": []\n}\n}\n';
    const p = problem(text);
    expect([p.line, p.column]).toEqual([4, 1]);
    expect(p.message).toMatchInlineSnapshot(`"policy.json:4:1: not valid JSON: unexpected "}" after the document"`);
    expect(message('{} {}')).toMatchInlineSnapshot(`"policy.json:1:4: not valid JSON: unexpected "{" after the document"`);
  });

  it('refuses comments, single quotes and bare words the way JSON does', () => {
    expect(message('{\n  // the policy\n}')).toMatchInlineSnapshot(
      `"policy.json:2:3: not valid JSON: expected a property name in double quotes, found "/""`,
    );
    expect(message("{'breakers': {}}")).toMatchInlineSnapshot(
      `"policy.json:1:2: not valid JSON: expected a property name in double quotes, found "'""`,
    );
    expect(message('{"breakers": {"per_tool_rpm": thirty}}')).toMatchInlineSnapshot(
      `"policy.json:1:31: not valid JSON: expected a value, found "t""`,
    );
    expect(message('{"breakers" {}}')).toMatchInlineSnapshot(
      `"policy.json:1:13: not valid JSON: expected ":" after "breakers", found "{""`,
    );
    expect(message('{"breakers": {} "bind_roots": []}')).toMatchInlineSnapshot(
      `"policy.json:1:17: not valid JSON: expected "," or "}" after a property, found "\\"""`,
    );
  });

  it('counts columns in UTF-16 code units after multi-byte text on the same line', () => {
    const text = '{"persona_namespaces": {"coder": "cödé"}, "x": 1,}';
    const p = problem(text);
    expect([p.line, p.column]).toEqual([1, text.length]);
  });
});

describe('parsePolicyDocument: schema errors name the key, the rule and the value', () => {
  it('refuses a wrong type, pointing at the value on a multi-line document', () => {
    const text = '{\n  "breakers": {\n    "per_tool_rpm": "30"\n  }\n}\n';
    expect(problem(text)).toEqual({
      file: 'policy.json',
      line: 3,
      column: 21,
      pointer: '/breakers/per_tool_rpm',
      reason: 'breakers.per_tool_rpm must be an integer (got "30")',
      message: 'policy.json:3:21: breakers.per_tool_rpm must be an integer (got "30")',
    });
    expect(where(text, '"30"')).toEqual({ line: 3, column: 21 });
  });

  it('names every kind of type mismatch', () => {
    expect(message('[]')).toMatchInlineSnapshot(`"policy.json:1:1: the document must be an object (got [])"`);
    expect(message('{"breakers": {"cooldown_s": 1.5}}')).toMatchInlineSnapshot(
      `"policy.json:1:29: breakers.cooldown_s must be an integer (got 1.5)"`,
    );
    expect(message('{"breakers": []}')).toMatchInlineSnapshot(`"policy.json:1:14: breakers must be an object (got [])"`);
    expect(message('{"runtimes": {"allow": "node"}}')).toMatchInlineSnapshot(
      `"policy.json:1:24: runtimes.allow must be an array (got "node")"`,
    );
    expect(message('{"forbidden_tool_names": [1]}')).toMatchInlineSnapshot(
      `"policy.json:1:27: forbidden_tool_names[0] must be a string (got 1)"`,
    );
    expect(message('{"persona_secret_allow": {"coder": "TOKEN"}}')).toMatchInlineSnapshot(
      `"policy.json:1:36: persona_secret_allow.coder must be an array (got "TOKEN")"`,
    );
    expect(message('{"$schema": null}')).toMatchInlineSnapshot(`"policy.json:1:13: $schema must be a string (got null)"`);
  });

  it('refuses a non-positive integer where a positive one is required', () => {
    for (const key of ['per_tool_rpm', 'per_session_forge_count', 'failure_threshold', 'cooldown_s']) {
      expect(problem(`{"breakers": {"${key}": 0}}`).reason).toBe(`breakers.${key} must be a positive integer (got 0)`);
    }
    expect(message('{"breakers": {"per_tool_rpm": -3}}')).toMatchInlineSnapshot(
      `"policy.json:1:31: breakers.per_tool_rpm must be a positive integer (got -3)"`,
    );
    expect(message('{"budgets": {"ceilings": {"cpu_s": 0}}}')).toMatchInlineSnapshot(
      `"policy.json:1:36: budgets.ceilings.cpu_s must be a positive integer (got 0)"`,
    );
  });

  it('refuses budgets under their minimum', () => {
    expect(message('{"budgets": {"defaults": {"timeout_ms": 99}}}')).toMatchInlineSnapshot(
      `"policy.json:1:41: budgets.defaults.timeout_ms must be at least 100 (got 99)"`,
    );
    expect(message('{"budgets": {"ceilings": {"output_cap": 1023}}}')).toMatchInlineSnapshot(
      `"policy.json:1:41: budgets.ceilings.output_cap must be at least 1024 (got 1023)"`,
    );
    expect(message('{"budgets": {"defaults": {"artifacts_bytes": 4095}}}')).toMatchInlineSnapshot(
      `"policy.json:1:46: budgets.defaults.artifacts_bytes must be at least 4096 (got 4095)"`,
    );
    expect(message('{"budgets": {"ceilings": {"artifacts_bytes": 0}}}')).toMatchInlineSnapshot(
      `"policy.json:1:46: budgets.ceilings.artifacts_bytes must be at least 4096 (got 0)"`,
    );
    expect(message('{"budgets": {"defaults": {"artifacts_bytes": 65536.5}}}')).toMatchInlineSnapshot(
      `"policy.json:1:46: budgets.defaults.artifacts_bytes must be an integer (got 65536.5)"`,
    );
  });

  it('refuses an unknown key, suggesting the closest known key', () => {
    const text = '{\n  "breakers": {\n    "per_tool_rmp": 5\n  }\n}';
    const p = problem(text);
    expect(p).toMatchObject({ pointer: '/breakers/per_tool_rmp', ...where(text, '5') });
    expect(p.message).toMatchInlineSnapshot(`"policy.json:3:21: unknown key "per_tool_rmp" in breakers (did you mean "per_tool_rpm"?)"`);
    expect(message('{"forbiden_tool_names": []}')).toMatchInlineSnapshot(
      `"policy.json:1:25: unknown key "forbiden_tool_names" in the document (did you mean "forbidden_tool_names"?)"`,
    );
    expect(message('{"persona_sandbox_overrides": {"coder": {"netwrk": "allow"}}}')).toMatchInlineSnapshot(
      `"policy.json:1:52: unknown key "netwrk" in persona_sandbox_overrides.coder (did you mean "network"?)"`,
    );
    expect(message('{"budgets": {"default": {}}}')).toMatchInlineSnapshot(
      `"policy.json:1:25: unknown key "default" in budgets (did you mean "defaults"?)"`,
    );
  });

  it('refuses an unknown key with nothing close, listing the keys it knows', () => {
    expect(message('{"per_tool_rpm": 3}')).toMatchInlineSnapshot(
      `"policy.json:1:18: unknown key "per_tool_rpm" in the document (expected one of: forbidden_tool_names, breakers, persona_namespaces, operator_personas, persona_sandbox_overrides, persona_secret_allow, secret_delivery, budgets, bind_roots, bind_allow, runtimes, toolsmith, hooks)"`,
    );
    expect(message('{"breakers": {"rpm": 3}}')).toMatchInlineSnapshot(
      `"policy.json:1:22: unknown key "rpm" in breakers (expected one of: per_tool_rpm, per_session_forge_count, failure_threshold, cooldown_s)"`,
    );
    expect(message('{"runtimes": {"deny": []}}')).toMatchInlineSnapshot(
      `"policy.json:1:23: unknown key "deny" in runtimes (expected one of: allow)"`,
    );
    // "$schema" is allowed but never suggested.
    expect(problem('{"$schemas": ""}').reason).not.toContain('did you mean');
  });

  it('refuses a bad persona name in each per-persona map, at its value', () => {
    const text = '{\n  "persona_namespaces": {\n    "coder": "code",\n    "9lives": "cat"\n  }\n}';
    const p = problem(text);
    expect(p).toMatchObject({ pointer: '/persona_namespaces/9lives', ...where(text, '"cat"') });
    expect(p.message).toMatchInlineSnapshot(
      `"policy.json:4:15: persona_namespaces has a key "9lives" that is not a persona name: a letter, then letters, digits, _ or - (at most 64)"`,
    );
    expect(message('{"persona_sandbox_overrides": {"my persona": {}}}')).toMatchInlineSnapshot(
      `"policy.json:1:46: persona_sandbox_overrides has a key "my persona" that is not a persona name: a letter, then letters, digits, _ or - (at most 64)"`,
    );
    expect(message('{"persona_secret_allow": {"_x": []}}')).toMatchInlineSnapshot(
      `"policy.json:1:33: persona_secret_allow has a key "_x" that is not a persona name: a letter, then letters, digits, _ or - (at most 64)"`,
    );
    expect(message(JSON.stringify({ persona_secret_allow: { [`a${'b'.repeat(64)}`]: [] } }))).toMatchInlineSnapshot(
      `"policy.json:1:94: persona_secret_allow has a key "abbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" that is not a persona name: a letter, then letters, digits, _ or - (at most 64)"`,
    );
    // Keys with / and ~ are escaped in the pointer (RFC 6901).
    expect(problem('{"persona_namespaces": {"a/b~c": "x"}}').pointer).toBe('/persona_namespaces/a~1b~0c');
  });

  it('refuses a bad namespace', () => {
    expect(message('{"persona_namespaces": {"coder": "1code"}}')).toMatchInlineSnapshot(
      `"policy.json:1:34: persona_namespaces.coder must be a namespace: dot-separated words of letters, digits, _ and -, each starting with a letter (got "1code")"`,
    );
    expect(message('{"persona_namespaces": {"coder": "code."}}')).toMatchInlineSnapshot(
      `"policy.json:1:34: persona_namespaces.coder must be a namespace: dot-separated words of letters, digits, _ and -, each starting with a letter (got "code.")"`,
    );
    expect(message('{"persona_namespaces": {"coder": "code.*"}}')).toMatchInlineSnapshot(
      `"policy.json:1:34: persona_namespaces.coder must be a namespace: dot-separated words of letters, digits, _ and -, each starting with a letter (got "code.*")"`,
    );
    expect(message(JSON.stringify({ persona_namespaces: { coder: `n${'s'.repeat(63)}` } }))).toMatchInlineSnapshot(
      `"policy.json:1:32: persona_namespaces.coder must be at most 63 characters (got "nsssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssss")"`,
    );
  });

  it('refuses a value outside an enum', () => {
    expect(message('{"persona_sandbox_overrides": {"coder": {"network": "maybe"}}}')).toMatchInlineSnapshot(
      `"policy.json:1:53: persona_sandbox_overrides.coder.network must be one of "allow", "deny" (got "maybe")"`,
    );
    expect(message('{"persona_sandbox_overrides": {"coder": {"loopback": true}}}')).toMatchInlineSnapshot(
      `"policy.json:1:54: persona_sandbox_overrides.coder.loopback must be one of "allow", "deny" (got true)"`,
    );
    expect(message('{"persona_sandbox_overrides": {"coder": {"private_networks": "ALLOW"}}}')).toMatchInlineSnapshot(
      `"policy.json:1:62: persona_sandbox_overrides.coder.private_networks must be one of "allow", "deny" (got "ALLOW")"`,
    );
  });

  it('refuses a bad tool-name glob and a bad runtime glob', () => {
    expect(message('{"forbidden_tool_names": ["bad name"]}')).toMatchInlineSnapshot(
      `"policy.json:1:27: forbidden_tool_names[0] must be a tool-name glob: 1–64 of letters, digits, _ . - and the wildcards * ? (got "bad name")"`,
    );
    expect(message('{"forbidden_tool_names": [""]}')).toMatchInlineSnapshot(
      `"policy.json:1:27: forbidden_tool_names[0] must be a tool-name glob: 1–64 of letters, digits, _ . - and the wildcards * ? (got "")"`,
    );
    expect(message(JSON.stringify({ forbidden_tool_names: ['a'.repeat(65)] }))).toMatchInlineSnapshot(
      `"policy.json:1:26: forbidden_tool_names[0] must be a tool-name glob: 1–64 of letters, digits, _ . - and the wildcards * ? (got "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")"`,
    );
    expect(message('{"runtimes": {"allow": ["python[3]"]}}')).toMatchInlineSnapshot(
      `"policy.json:1:25: runtimes.allow[0] must be a tool-name glob: 1–64 of letters, digits, _ . - and the wildcards * ? (got "python[3]")"`,
    );
  });

  it('refuses a bad domain pattern', () => {
    expect(message('{"persona_sandbox_overrides": {"coder": {"allow_domains": ["*example.com"]}}}')).toMatchInlineSnapshot(
      `"policy.json:1:60: persona_sandbox_overrides.coder.allow_domains[0] must be a domain (example.com) or a suffix pattern (*.example.com) (got "*example.com")"`,
    );
    expect(message('{"persona_sandbox_overrides": {"coder": {"deny_domains": ["https://x.org"]}}}')).toMatchInlineSnapshot(
      `"policy.json:1:59: persona_sandbox_overrides.coder.deny_domains[0] must be a domain (example.com) or a suffix pattern (*.example.com) (got "https://x.org")"`,
    );
    expect(problem('{"persona_sandbox_overrides": {"c": {"allow_domains": ["a..b"]}}}').pointer).toBe(
      '/persona_sandbox_overrides/c/allow_domains/0',
    );
  });

  it('refuses a port out of range', () => {
    expect(message('{"persona_sandbox_overrides": {"coder": {"allow_ports": [443, 70000]}}}')).toMatchInlineSnapshot(
      `"policy.json:1:63: persona_sandbox_overrides.coder.allow_ports[1] must be at most 65535 (got 70000)"`,
    );
    expect(message('{"persona_sandbox_overrides": {"coder": {"allow_ports": [0]}}}')).toMatchInlineSnapshot(
      `"policy.json:1:58: persona_sandbox_overrides.coder.allow_ports[0] must be a positive integer (got 0)"`,
    );
    expect(message('{"persona_sandbox_overrides": {"coder": {"allow_ports": [80.5]}}}')).toMatchInlineSnapshot(
      `"policy.json:1:58: persona_sandbox_overrides.coder.allow_ports[0] must be an integer (got 80.5)"`,
    );
  });

  it('refuses a relative bind root', () => {
    const text = '{\n  "bind_roots": [\n    "/srv",\n    "data/shared"\n  ]\n}';
    const p = problem(text);
    expect(p).toMatchObject({ pointer: '/bind_roots/1', ...where(text, '"data/shared"') });
    expect(p.message).toMatchInlineSnapshot(
      `"policy.json:4:5: bind_roots[1] must be an absolute path, ~/… or \${project}/… (got "data/shared")"`,
    );
    for (const bad of ['~user/x', `\${project}x`, '$HOME/x', './x', '']) {
      expect(problem(JSON.stringify({ bind_roots: [bad] })).reason).toBe(
        `bind_roots[0] must be an absolute path, ~/… or \${project}/… (got ${JSON.stringify(bad)})`,
      );
    }
  });

  it('refuses a bind_allow entry that is not an absolute path, ~/… or the project token, as it refuses a bind root', () => {
    const text = '{\n  "bind_allow": [\n    "~/.bashrc",\n    ".git"\n  ]\n}';
    const p = problem(text);
    expect(p).toMatchObject({ pointer: '/bind_allow/1', ...where(text, '".git"') });
    expect(p.message).toMatchInlineSnapshot(`"policy.json:4:5: bind_allow[1] must be an absolute path, ~/… or \${project}/… (got ".git")"`);
    for (const bad of ['~user/.bashrc', `\${project}.git`, '$HOME/.zshrc', './.envrc', '']) {
      expect(problem(JSON.stringify({ bind_allow: [bad] })).reason).toBe(
        `bind_allow[0] must be an absolute path, ~/… or \${project}/… (got ${JSON.stringify(bad)})`,
      );
    }
    expect(message('{"bind_allow": "/srv/.git"}')).toMatchInlineSnapshot(
      `"policy.json:1:16: bind_allow must be an array (got "/srv/.git")"`,
    );
    expect(message('{"bind_allow": [7]}')).toMatchInlineSnapshot(`"policy.json:1:17: bind_allow[0] must be a string (got 7)"`);
  });

  it('refuses a default budget above the ceiling set by the same document, at the default', () => {
    const text = '{\n  "budgets": {\n    "ceilings": { "cpu_s": 10 },\n    "defaults": { "cpu_s": 50 }\n  }\n}';
    expect(problem(text)).toEqual({
      file: 'policy.json',
      ...where(text, '50'),
      pointer: '/budgets/defaults/cpu_s',
      reason: 'budgets.defaults.cpu_s (50) is above budgets.ceilings.cpu_s (10)',
      message: `policy.json:${where(text, '50').line}:${where(text, '50').column}: budgets.defaults.cpu_s (50) is above budgets.ceilings.cpu_s (10)`,
    });
    expect(message('{"budgets": {"defaults": {"timeout_ms": 2000}, "ceilings": {"timeout_ms": 1000}}}')).toMatchInlineSnapshot(
      `"policy.json:1:41: budgets.defaults.timeout_ms (2000) is above budgets.ceilings.timeout_ms (1000)"`,
    );
    expect(message('{"budgets": {"defaults": {"output_cap": 4096}, "ceilings": {"output_cap": 2048}}}')).toMatchInlineSnapshot(
      `"policy.json:1:41: budgets.defaults.output_cap (4096) is above budgets.ceilings.output_cap (2048)"`,
    );
    const art =
      '{\n  "budgets": {\n    "defaults": { "artifacts_bytes": 1048577 },\n    "ceilings": { "artifacts_bytes": 1048576 }\n  }\n}';
    expect(problem(art)).toMatchObject({ pointer: '/budgets/defaults/artifacts_bytes', ...where(art, '1048577') });
    expect(problem(art).message).toMatchInlineSnapshot(
      `"policy.json:3:38: budgets.defaults.artifacts_bytes (1048577) is above budgets.ceilings.artifacts_bytes (1048576)"`,
    );
  });

  it('uses the file name as given', () => {
    expect(problem('{"x": 1}', '/home/u/.forge/policy.json').message).toMatch(/^\/home\/u\/\.forge\/policy\.json:1:7: /);
  });
});

describe('mergePolicies', () => {
  it('with no document is the defaults', () => {
    expect(mergePolicies()).toEqual(DEFAULT_POLICY);
    expect(mergePolicies({})).toEqual(DEFAULT_POLICY);
    expect(mergePolicies()).not.toBe(DEFAULT_POLICY);
  });

  it('unions forbidden_tool_names and bind_roots in order, without duplicates', () => {
    const p = mergePolicies(
      { forbidden_tool_names: ['rm_*', 'forge_*', 'x'], bind_roots: ['/srv', `\${project}`] },
      { forbidden_tool_names: ['x', 'y', 'rm_*'], bind_roots: ['~', '/srv', '/opt'] },
    );
    expect(p.forbidden_tool_names).toEqual(['forge_*', 'rm_*', 'x', 'y']);
    expect(p.bind_roots).toEqual([`\${project}`, '/srv', '~', '/opt']);
  });

  it('unions bind_allow in order, without duplicates, starting from none', () => {
    const p = mergePolicies(
      { bind_allow: ['~/.bashrc', `\${project}/.git`] },
      {},
      { bind_allow: [`\${project}/.git`, '/srv/.envrc', '~/.bashrc'] },
    );
    expect(p.bind_allow).toEqual(['~/.bashrc', `\${project}/.git`, '/srv/.envrc']);
    expect(mergePolicies({ bind_roots: ['/srv'] }).bind_allow).toEqual([]);
  });

  it('merges breakers and budgets field by field, the later document winning', () => {
    const p = mergePolicies(
      { breakers: { per_tool_rpm: 10, cooldown_s: 5 }, budgets: { defaults: { cpu_s: 7 }, ceilings: { timeout_ms: 90_000 } } },
      { breakers: { per_tool_rpm: 20, failure_threshold: 2 }, budgets: { defaults: { output_cap: 4096 } } },
    );
    expect(p.breakers).toEqual({ per_tool_rpm: 20, per_session_forge_count: 50, failure_threshold: 2, cooldown_s: 5 });
    expect(p.budgets).toEqual({
      defaults: { timeout_ms: 30_000, cpu_s: 7, output_cap: 4096, artifacts_bytes: 64 << 20 },
      ceilings: { timeout_ms: 90_000, cpu_s: 300, output_cap: 16 << 20, artifacts_bytes: 1 << 30 },
    });
  });

  it('replaces a persona entry whole, keeping the other personas', () => {
    const p = mergePolicies(
      {
        persona_namespaces: { coder: 'code', reviewer: 'review' },
        persona_sandbox_overrides: {
          coder: { network: 'allow', allow_domains: ['pypi.org'], allow_ports: [443] },
          ops: { loopback: 'allow' },
        },
        persona_secret_allow: { coder: ['A', 'B'], ops: ['C'] },
      },
      {
        persona_namespaces: { coder: 'dev' },
        persona_sandbox_overrides: { coder: { loopback: 'allow' } },
        persona_secret_allow: { coder: ['B'] },
      },
    );
    expect(p.persona_namespaces).toEqual({ coder: 'dev', reviewer: 'review' });
    expect(p.persona_sandbox_overrides).toEqual({ coder: { loopback: 'allow' }, ops: { loopback: 'allow' } });
    expect(p.persona_secret_allow).toEqual({ coder: ['B'], ops: ['C'] });
  });

  it('replaces runtimes.allow, and keeps it when a later document does not set it', () => {
    expect(mergePolicies({ runtimes: { allow: ['deno'] } }).runtimes).toEqual({ allow: ['deno'] });
    expect(mergePolicies({ runtimes: { allow: ['deno'] } }, { runtimes: { allow: [] } }).runtimes).toEqual({ allow: [] });
    expect(mergePolicies({ runtimes: { allow: ['deno'] } }, { runtimes: {} }, {}).runtimes).toEqual({ allow: ['deno'] });
  });

  it('lowers a default budget to the ceiling in force, field by field', () => {
    const p = mergePolicies(
      { budgets: { defaults: { timeout_ms: 200_000, cpu_s: 40, output_cap: 2048 } } },
      { budgets: { ceilings: { timeout_ms: 20_000, output_cap: 4096 } } },
    );
    expect(p.budgets).toEqual({
      defaults: { timeout_ms: 20_000, cpu_s: 40, output_cap: 2048, artifacts_bytes: 64 << 20 },
      ceilings: { timeout_ms: 20_000, cpu_s: 300, output_cap: 4096, artifacts_bytes: 1 << 30 },
    });
    // The bundle's own defaults too, when a document lowers only the ceiling.
    expect(mergePolicies({ budgets: { ceilings: { cpu_s: 3 } } }).budgets.defaults.cpu_s).toBe(3);
    expect(mergePolicies({ budgets: { ceilings: { artifacts_bytes: 1 << 20 } } }).budgets.defaults.artifacts_bytes).toBe(1 << 20);
    expect(mergePolicies({ budgets: { defaults: { artifacts_bytes: 2 ** 31 } } }).budgets.defaults.artifacts_bytes).toBe(1 << 30);
  });

  it('returns a deeply frozen policy', () => {
    const p = mergePolicies({ persona_sandbox_overrides: { coder: { allow_domains: ['a.org'] } }, persona_secret_allow: { coder: ['A'] } });
    const frozen: unknown[] = [
      p,
      p.forbidden_tool_names,
      p.breakers,
      p.persona_namespaces,
      p.persona_sandbox_overrides,
      p.persona_sandbox_overrides.coder,
      p.persona_sandbox_overrides.coder?.allow_domains,
      p.persona_secret_allow,
      p.persona_secret_allow.coder,
      p.budgets,
      p.budgets.defaults,
      p.budgets.ceilings,
      p.bind_roots,
      p.bind_allow,
      p.runtimes,
      p.runtimes.allow,
    ];
    expect(frozen.map((x) => Object.isFrozen(x))).toEqual(frozen.map(() => true));
    expect(() => {
      (p.breakers as { per_tool_rpm: number }).per_tool_rpm = 1;
    }).toThrow(TypeError);
    expect(() => (p.forbidden_tool_names as string[]).push('x')).toThrow(TypeError);
    expect(Object.isFrozen(DEFAULT_POLICY.runtimes.allow)).toBe(true);
  });

  it('neither freezes nor shares the documents it merges', () => {
    const doc: PolicyDocument = {
      forbidden_tool_names: ['a'],
      persona_sandbox_overrides: { coder: { allow_domains: ['a.org'], deny_domains: ['b.org'], allow_ports: [443] } },
      persona_secret_allow: { coder: ['A'] },
      runtimes: { allow: ['node'] },
    };
    const p = mergePolicies(doc);
    const o = doc.persona_sandbox_overrides?.coder;
    expect([o, o?.allow_domains, o?.deny_domains, o?.allow_ports, doc.persona_secret_allow?.coder].map((x) => Object.isFrozen(x))).toEqual([
      false,
      false,
      false,
      false,
      false,
    ]);
    o?.allow_domains?.push('c.org');
    expect(p.persona_sandbox_overrides.coder?.allow_domains).toEqual(['a.org']);
  });

  it('the defaults, written as a document, are valid against the schema and merge to themselves', () => {
    const text = JSON.stringify(DEFAULT_POLICY, null, 2);
    const r = parsePolicyDocument(text, 'defaults.json');
    expect(r).toEqual({ ok: true, value: JSON.parse(text) });
    const again: EffectivePolicy = mergePolicies(JSON.parse(text) as PolicyDocument);
    expect(again).toEqual(DEFAULT_POLICY);
  });

  it('DEFAULT_POLICY is what the bundle promises', () => {
    expect(DEFAULT_POLICY).toEqual({
      forbidden_tool_names: ['forge_*'],
      breakers: { per_tool_rpm: 60, per_session_forge_count: 50, failure_threshold: 5, cooldown_s: 60 },
      persona_namespaces: {},
      operator_personas: [],
      persona_sandbox_overrides: {},
      persona_secret_allow: {},
      budgets: {
        defaults: { timeout_ms: 30_000, cpu_s: 30, output_cap: 1_048_576, artifacts_bytes: 67_108_864 },
        ceilings: { timeout_ms: 300_000, cpu_s: 300, output_cap: 16_777_216, artifacts_bytes: 1_073_741_824 },
      },
      bind_roots: [`\${project}`],
      bind_allow: [],
      runtimes: { allow: ['python3', 'python3.*', 'node', 'bash', 'sh'] },
      toolsmith: {
        enabled: false,
        paused: false,
        mode: {},
        gap_recurrence_threshold: 3,
        gap_window_hours: 24,
        capability_allow: [],
        approvers: [],
        approve_in_client: false,
        cycle_interval_seconds: 3600,
        gap_store_max: 10_000,
      },
      hooks: { project: false },
      secret_delivery: {},
    });
  });

  it('secret_delivery: by secret name, the later entry replaces the earlier; none by default', () => {
    const inject = { inject: { hosts: ['api.example.com'], headers: ['Authorization'], format: 'Bearer {}' } };
    expect(mergePolicies().secret_delivery).toEqual({});
    expect(
      mergePolicies(
        { secret_delivery: { A: inject, B: 'env' } },
        { secret_delivery: { A: 'env', C: { inject: { hosts: ['x.test'], headers: ['X-Key'] } } } },
      ).secret_delivery,
    ).toEqual({ A: 'env', B: 'env', C: { inject: { hosts: ['x.test'], headers: ['X-Key'] } } });
  });

  it('secret_delivery: refuses what cannot be delivered, at its line', () => {
    const cases: [string, string, RegExp][] = [
      ['no {} in the format', '{ "inject": { "hosts": ["a.test"], "headers": ["Authorization"], "format": "Bearer" } }', /format/],
      ['two {}', '{ "inject": { "hosts": ["a.test"], "headers": ["Authorization"], "format": "{} {}" } }', /format/],
      ['a wildcard host', '{ "inject": { "hosts": ["*.a.test"], "headers": ["Authorization"] } }', /hosts/],
      ['no headers', '{ "inject": { "hosts": ["a.test"], "headers": [] } }', /headers/],
      ['a header name with a space', '{ "inject": { "hosts": ["a.test"], "headers": ["X Key"] } }', /headers/],
      ['another word', '"environment"', /secret_delivery/],
      ['an unknown field', '{ "inject": { "hosts": ["a.test"], "headers": ["A"], "to": 1 } }', /to|additional/],
    ];
    for (const [what, value, field] of cases) {
      const text = `{\n  "secret_delivery": {\n    "API_KEY": ${value}\n  }\n}\n`;
      const p = problem(text);
      expect(p.line, what).toBe(3);
      expect(p.message, what).toMatch(/^policy\.json:3:\d+: /);
      expect(p.message, what).toMatch(field);
    }
    expect(message('{ "secret_delivery": { "bad name": "env" } }')).toMatch(/secret_delivery/);
  });

  it('hooks.project: the later document wins, and it is off by default', () => {
    expect(mergePolicies().hooks).toEqual({ project: false });
    expect(mergePolicies({ hooks: { project: true } }).hooks).toEqual({ project: true });
    expect(mergePolicies({ hooks: { project: true } }, { hooks: { project: false } }).hooks).toEqual({ project: false });
    expect(mergePolicies({ hooks: { project: true } }, { hooks: {} }).hooks).toEqual({ project: true });
  });

  it('toolsmith: field by field, lists replaced, mode by persona, and paused once any document says so', () => {
    const m = mergePolicies(
      { toolsmith: { enabled: true, paused: true, mode: { '*': 'governed' }, capability_allow: ['a.*'], approvers: ['ops'] } },
      { toolsmith: { paused: false, mode: { coder: 'direct' }, capability_allow: ['b.*'], gap_window_hours: 2 } },
    );
    expect(m.toolsmith).toEqual({
      enabled: true,
      paused: true,
      mode: { '*': 'governed', coder: 'direct' },
      gap_recurrence_threshold: 3,
      gap_window_hours: 2,
      capability_allow: ['b.*'],
      approvers: ['ops'],
      approve_in_client: false,
      cycle_interval_seconds: 3600,
      gap_store_max: 10_000,
    });
  });
});

describe('the published schema', () => {
  it('schema/policy.schema.json is POLICY_SCHEMA', () => {
    const file = JSON.parse(readFileSync(new URL('../schema/policy.schema.json', import.meta.url), 'utf8')) as unknown;
    expect(file).toEqual(POLICY_SCHEMA);
    expect(POLICY_SCHEMA.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
  });

  it('the package exports the schema file', () => {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
      exports: Record<string, unknown>;
      files: string[];
    };
    expect(pkg.exports['./policy.schema.json']).toBe('./schema/policy.schema.json');
    expect(pkg.files).toContain('schema');
  });
});
