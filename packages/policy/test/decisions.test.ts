/**
 * Every decision, as a pure function of a snapshot built from documents merged over the
 * defaults (and, where it matters, allow-rules).
 */
import { homedir } from 'node:os';
import { describe, expect, it } from 'vitest';
import {
  bindAllow,
  bindRoots,
  checkAllowRule,
  checkCapability,
  checkNamespace,
  checkPersonaAcl,
  checkRuntime,
  checkSecrets,
  checkToolName,
  clampBudget,
  createSnapshot,
  DEFAULT_POLICY,
  mergePolicies,
  networkFor,
  parseToolAcl,
  secretDelivery,
  toolsmithFor,
} from '../src/index.js';
import { denied, rulesOf, snapshotOf } from './helpers.js';

const OK = { ok: true };

describe('checkToolName', () => {
  const snap = snapshotOf({ forbidden_tool_names: ['rm_*', 'sh?ll', 'sys.exec'] });

  it('refuses names matching a forbidden glob, naming the pattern', () => {
    expect(denied(checkToolName(snap, 'rm_rf'), 'name_forbidden')).toMatchInlineSnapshot(
      `"tool name "rm_rf" matches the forbidden pattern "rm_*" (policy forbidden_tool_names); choose another name"`,
    );
    expect(denied(checkToolName(snap, 'shell'), 'name_forbidden')).toMatchInlineSnapshot(
      `"tool name "shell" matches the forbidden pattern "sh?ll" (policy forbidden_tool_names); choose another name"`,
    );
    expect(denied(checkToolName(snap, 'sys.exec'), 'name_forbidden')).toMatchInlineSnapshot(
      `"tool name "sys.exec" matches the forbidden pattern "sys.exec" (policy forbidden_tool_names); choose another name"`,
    );
  });

  it('* matches any run of characters, dots and the empty run included; ? exactly one', () => {
    for (const name of ['rm_', 'rm_a.b.c', 'shall', 'sh.ll']) expect(checkToolName(snap, name).ok, name).toBe(false);
    for (const name of ['rm', 'xrm_a', 'shll', 'sheell', 'shell2']) expect(checkToolName(snap, name), name).toEqual(OK);
  });

  it('takes a dot literally', () => {
    expect(checkToolName(snap, 'sysXexec')).toEqual(OK);
    expect(checkToolName(snap, 'sys.exec.x')).toEqual(OK);
  });

  it('reserves forge_* by default', () => {
    const plain = snapshotOf();
    expect(denied(checkToolName(plain, 'forge_list'), 'name_forbidden')).toMatchInlineSnapshot(
      `"tool name "forge_list" matches the forbidden pattern "forge_*" (policy forbidden_tool_names); choose another name"`,
    );
    expect(checkToolName(plain, 'forge_')).toMatchObject({ ok: false, kind: 'name_forbidden' });
    for (const name of ['forge', 'my_forge_x', 'forgelist', 'fib']) expect(checkToolName(plain, name), name).toEqual(OK);
  });

  it('names the first matching pattern when several match', () => {
    const s = snapshotOf({ forbidden_tool_names: ['a*', '*z'] });
    expect(denied(checkToolName(s, 'abz'), 'name_forbidden')).toContain('pattern "a*"');
    expect(denied(checkToolName(s, 'xyz'), 'name_forbidden')).toContain('pattern "*z"');
  });
});

describe('checkNamespace', () => {
  const snap = snapshotOf({ persona_namespaces: { coder: 'code', reviewer: 'review.tools' } });

  it('lets a persona with a namespace forge under it, at any depth', () => {
    expect(checkNamespace(snap, 'coder', 'code.fib')).toEqual(OK);
    expect(checkNamespace(snap, 'coder', 'code.math.fib')).toEqual(OK);
    expect(checkNamespace(snap, 'reviewer', 'review.tools.lint')).toEqual(OK);
  });

  it('requires its own prefix with the dot, suggesting a name under it', () => {
    expect(denied(checkNamespace(snap, 'coder', 'fib'), 'namespace_denied')).toMatchInlineSnapshot(
      `"persona "coder" may only forge tools named code.<name> (policy persona_namespaces); rename "fib" to code.fib"`,
    );
    expect(denied(checkNamespace(snap, 'coder', 'codex'), 'namespace_denied')).toMatchInlineSnapshot(
      `"persona "coder" may only forge tools named code.<name> (policy persona_namespaces); rename "codex" to code.codex"`,
    );
    expect(denied(checkNamespace(snap, 'coder', 'code'), 'namespace_denied')).toContain('rename "code" to code.code');
    expect(denied(checkNamespace(snap, 'reviewer', 'review.lint'), 'namespace_denied')).toMatchInlineSnapshot(
      `"persona "reviewer" may only forge tools named review.tools.<name> (policy persona_namespaces); rename "review.lint" to review.tools.lint"`,
    );
    expect(denied(checkNamespace(snap, 'coder', 'review.tools.x'), 'namespace_denied')).toContain('to code.x');
  });

  it('keeps a persona without a namespace out of the others’ namespaces', () => {
    expect(denied(checkNamespace(snap, 'writer', 'code.fib'), 'namespace_denied')).toMatchInlineSnapshot(
      `""code.fib" is in the namespace of persona "coder" (code.*), and persona "writer" may not forge there; choose a name outside it"`,
    );
    expect(denied(checkNamespace(snap, 'writer', 'review.tools.x'), 'namespace_denied')).toMatchInlineSnapshot(
      `""review.tools.x" is in the namespace of persona "reviewer" (review.tools.*), and persona "writer" may not forge there; choose a name outside it"`,
    );
  });

  it('lets a persona without a namespace use names that merely start with the same letters', () => {
    for (const name of ['fib', 'codex', 'code', 'code_fib', 'review.toolsx', 'review.fib', 'x.code.fib']) {
      expect(checkNamespace(snap, 'writer', name), name).toEqual(OK);
    }
  });

  it('allows everything when no persona has a namespace', () => {
    const plain = snapshotOf();
    expect(checkNamespace(plain, 'coder', 'code.fib')).toEqual(OK);
    expect(checkNamespace(plain, 'coder', 'anything')).toEqual(OK);
  });

  it('treats a persona named like an Object.prototype member as any other persona', () => {
    // "constructor" and "toString" are valid persona names (schema: a letter, then letters…).
    const plain = snapshotOf({ persona_namespaces: { coder: 'code' } });
    expect(checkNamespace(plain, 'constructor', 'fib')).toEqual(OK);
    expect(checkNamespace(plain, 'toString', 'fib')).toEqual(OK);
    expect(checkNamespace(plain, 'constructor', 'code.fib')).toMatchObject({ ok: false, kind: 'namespace_denied' });
  });
});

describe('parseToolAcl and checkPersonaAcl', () => {
  it('unset means every tool', () => {
    const acl = parseToolAcl(undefined);
    expect(acl).toEqual({ all: true });
    expect(checkPersonaAcl(acl, 'coder', 'anything.at.all')).toEqual(OK);
  });

  it('an empty string means no tool (meta-tools still callable)', () => {
    for (const value of ['', ' ', ',', ' , ,']) {
      const acl = parseToolAcl(value);
      expect(acl).toEqual({ all: false, patterns: [], match: { test: expect.any(Function) } });
      expect(denied(checkPersonaAcl(acl, 'coder', 'fib'), 'acl.persona_denied')).toBe(
        'persona "coder" may not call "fib": it is not in FORGE_ALLOWED_TOOLS (empty); ask the operator to add it',
      );
      expect(checkPersonaAcl(acl, 'coder', 'forge_list', ['forge_list', 'forge_new'])).toEqual(OK);
    }
  });

  it('reads a comma list of names and globs, trimming blanks', () => {
    const acl = parseToolAcl(' fib , code.* ,, sq? ');
    expect(acl).toEqual({ all: false, patterns: ['fib', 'code.*', 'sq?'], match: { test: expect.any(Function) } });
    for (const name of ['fib', 'code.a', 'code.a.b', 'code.', 'sqr', 'sq.']) expect(checkPersonaAcl(acl, 'coder', name), name).toEqual(OK);
    for (const name of ['fibo', 'xfib', 'code', 'codex', 'sq', 'sqrt']) {
      expect(checkPersonaAcl(acl, 'coder', name).ok, name).toBe(false);
    }
    expect(denied(checkPersonaAcl(acl, 'coder', 'fibo'), 'acl.persona_denied')).toMatchInlineSnapshot(
      `"persona "coder" may not call "fibo": it is not in FORGE_ALLOWED_TOOLS (fib, code.*, sq?); ask the operator to add it"`,
    );
  });

  it('takes regular-expression characters literally', () => {
    const acl = parseToolAcl('a+b,(x)');
    expect(checkPersonaAcl(acl, 'p', 'a+b')).toEqual(OK);
    expect(checkPersonaAcl(acl, 'p', '(x)')).toEqual(OK);
    expect(checkPersonaAcl(acl, 'p', 'aab').ok).toBe(false);
    expect(checkPersonaAcl(acl, 'p', 'x').ok).toBe(false);
  });

  it('always lets meta-tools through, and only by exact name', () => {
    const acl = parseToolAcl('fib');
    expect(checkPersonaAcl(acl, 'coder', 'forge_describe', ['forge_describe'])).toEqual(OK);
    expect(checkPersonaAcl(acl, 'coder', 'forge_describe2', ['forge_describe']).ok).toBe(false);
    expect(checkPersonaAcl(acl, 'coder', 'forge_describe').ok).toBe(false);
  });
});

describe('checkAllowRule', () => {
  it('allows everything when no rules file is in force', () => {
    const snap = snapshotOf();
    expect(snap.rules).toBe(null);
    expect(checkAllowRule(snap, 'coder', 'tool', 'anything', 'execute')).toEqual(OK);
    expect(checkAllowRule(snap, 'coder', 'network', 'default', 'connect')).toEqual(OK);
  });

  it('requires the exact rule when rules are in force', () => {
    const snap = snapshotOf({}, 'allow coder_t tool:code.fib execute\n');
    expect(checkAllowRule(snap, 'coder', 'tool', 'code.fib', 'execute')).toEqual(OK);
    expect(denied(checkAllowRule(snap, 'coder', 'tool', 'code.sq', 'execute'), 'policy_denied')).toMatchInlineSnapshot(
      `"policy.rules has no rule "allow coder_t tool:code.sq execute", and allow-rules deny what they do not allow; add that line to permit it"`,
    );
    expect(checkAllowRule(snap, 'reviewer', 'tool', 'code.fib', 'execute')).toMatchObject({ ok: false, kind: 'policy_denied' });
    expect(checkAllowRule(snap, 'coder', 'tool', 'code.fi', 'execute')).toMatchObject({ ok: false, kind: 'policy_denied' });
    expect(checkAllowRule(snap, 'coder', 'network', 'default', 'connect')).toMatchObject({ ok: false, kind: 'policy_denied' });
  });

  it('an empty rules file denies everything', () => {
    const snap = snapshotOf({}, '# nothing allowed yet\n');
    expect(checkAllowRule(snap, 'coder', 'tool', 'fib', 'execute')).toMatchObject({ ok: false, kind: 'policy_denied' });
  });
});

describe('networkFor', () => {
  const closed = { network: 'deny', loopback: 'deny', private_networks: 'deny', allow_domains: [], deny_domains: [], allow_ports: [] };

  it('is closed by default', () => {
    expect(networkFor(snapshotOf(), 'coder')).toStrictEqual(closed);
  });

  it('opens what the persona’s override opens, for that persona only', () => {
    const snap = snapshotOf({
      persona_sandbox_overrides: {
        coder: { network: 'allow', allow_domains: ['pypi.org', '*.pythonhosted.org'], deny_domains: ['evil.org'], allow_ports: [443] },
      },
    });
    expect(networkFor(snap, 'coder')).toStrictEqual({
      network: 'allow',
      loopback: 'deny',
      private_networks: 'deny',
      allow_domains: ['pypi.org', '*.pythonhosted.org'],
      deny_domains: ['evil.org'],
      allow_ports: [443],
    });
    expect(networkFor(snap, 'reviewer')).toStrictEqual(closed);
  });

  it('opens loopback and private networks on their own', () => {
    const snap = snapshotOf({
      persona_sandbox_overrides: { coder: { loopback: 'allow' }, ops: { private_networks: 'allow', network: 'deny' } },
    });
    expect(networkFor(snap, 'coder')).toStrictEqual({ ...closed, loopback: 'allow' });
    expect(networkFor(snap, 'ops')).toStrictEqual({ ...closed, private_networks: 'allow' });
  });

  it('denies an allowed network when allow-rules are in force without network:default connect, saying why', () => {
    const doc = { persona_sandbox_overrides: { coder: { network: 'allow' as const, loopback: 'allow' as const, allow_ports: [443] } } };
    const grant = networkFor(snapshotOf(doc, 'allow coder_t tool:fib execute'), 'coder');
    // Everything the override opened is closed again, not only the network.
    expect(grant).toStrictEqual({ ...closed, denied_by: expect.any(String) });
    expect(grant.denied_by).toMatchInlineSnapshot(
      `"policy.rules has no rule "allow coder_t network:default connect", and allow-rules deny what they do not allow; add that line to permit it"`,
    );
    // With the rule, the override stands.
    const ruled = networkFor(snapshotOf(doc, 'allow coder_t network:default connect'), 'coder');
    expect(ruled).toStrictEqual({ ...closed, network: 'allow', loopback: 'allow', allow_ports: [443] });
    // Another persona's rule does not count.
    expect(networkFor(snapshotOf(doc, 'allow other_t network:default connect'), 'coder').network).toBe('deny');
  });

  it('has nothing to deny when the network is closed anyway', () => {
    expect(networkFor(snapshotOf({}, 'allow coder_t tool:fib execute'), 'coder')).toStrictEqual(closed);
  });

  it('treats a persona named like an Object.prototype member as having no override', () => {
    for (const persona of ['constructor', 'toString', 'hasOwnProperty']) expect(networkFor(snapshotOf(), persona)).toStrictEqual(closed);
  });
});

describe('secretDelivery', () => {
  it('delivers by environment unless policy says inject, names lower-cased and the format defaulted', () => {
    const snap = snapshotOf({
      secret_delivery: {
        GH: {
          inject: {
            hosts: ['API.GitHub.com.', 'api.github.com', '10.0.0.7'],
            headers: ['Authorization', 'authorization'],
            format: 'token {}',
          },
        },
        KEY: { inject: { hosts: ['x.test'], headers: ['X-Api-Key'] } },
        DB: 'env',
      },
    });
    expect(secretDelivery(snap, ['GH', 'DB', 'OTHER', 'KEY'])).toEqual({
      env: ['DB', 'OTHER'],
      inject: [
        { name: 'GH', hosts: ['api.github.com', '10.0.0.7'], headers: ['authorization'], format: 'token {}' },
        { name: 'KEY', hosts: ['x.test'], headers: ['x-api-key'], format: '{}' },
      ],
    });
    expect(secretDelivery(snapshotOf(), ['A'])).toEqual({ env: ['A'], inject: [] });
    // Names that are Object.prototype members are secrets like any other.
    expect(secretDelivery(snapshotOf(), ['constructor', '__proto__', 'toString'])).toEqual({
      env: ['constructor', '__proto__', 'toString'],
      inject: [],
    });
    const odd = snapshotOf(JSON.parse('{"secret_delivery": {"__proto__": {"inject": {"hosts": ["a.test"], "headers": ["X-Key"]}}}}'));
    expect(secretDelivery(odd, ['__proto__', 'OTHER'])).toEqual({
      env: ['OTHER'],
      inject: [{ name: '__proto__', hosts: ['a.test'], headers: ['x-key'], format: '{}' }],
    });
  });
});

describe('checkSecrets', () => {
  const snap = snapshotOf({ persona_secret_allow: { coder: ['GITHUB_TOKEN', 'PYPI_TOKEN'], reviewer: [] } });

  it('allows an empty request, whoever asks', () => {
    expect(checkSecrets(snap, 'coder', [])).toEqual(OK);
    expect(checkSecrets(snap, 'nobody', [])).toEqual(OK);
  });

  it('allows the listed secrets', () => {
    expect(checkSecrets(snap, 'coder', ['GITHUB_TOKEN'])).toEqual(OK);
    expect(checkSecrets(snap, 'coder', ['PYPI_TOKEN', 'GITHUB_TOKEN'])).toEqual(OK);
  });

  it('is fail-closed for a persona without an entry', () => {
    expect(denied(checkSecrets(snap, 'writer', ['GITHUB_TOKEN', 'X']), 'secret_denied')).toMatchInlineSnapshot(
      `"persona "writer" may not use any secret: policy persona_secret_allow has no entry for it (an operator adds "writer": ["GITHUB_TOKEN", "X"])"`,
    );
    expect(denied(checkSecrets(snapshotOf(), 'coder', ['A']), 'secret_denied')).toMatchInlineSnapshot(
      `"persona "coder" may not use any secret: policy persona_secret_allow has no entry for it (an operator adds "coder": ["A"])"`,
    );
  });

  it('names exactly the secrets missing from a partial list', () => {
    expect(denied(checkSecrets(snap, 'coder', ['GITHUB_TOKEN', 'AWS_KEY']), 'secret_denied')).toMatchInlineSnapshot(
      `"persona "coder" may not use secret "AWS_KEY" (policy persona_secret_allow.coder lists GITHUB_TOKEN, PYPI_TOKEN)"`,
    );
    expect(denied(checkSecrets(snap, 'coder', ['AWS_KEY', 'GITHUB_TOKEN', 'GCP_KEY']), 'secret_denied')).toMatchInlineSnapshot(
      `"persona "coder" may not use secrets "AWS_KEY", "GCP_KEY" (policy persona_secret_allow.coder lists GITHUB_TOKEN, PYPI_TOKEN)"`,
    );
    expect(denied(checkSecrets(snap, 'reviewer', ['GITHUB_TOKEN']), 'secret_denied')).toMatchInlineSnapshot(
      `"persona "reviewer" may not use secret "GITHUB_TOKEN" (policy persona_secret_allow.reviewer lists none)"`,
    );
  });

  it('is fail-closed for a persona named like an Object.prototype member', () => {
    // "toString" is a valid persona name; it has no entry, so it gets no secret (and no crash).
    expect(checkSecrets(snap, 'toString', ['GITHUB_TOKEN'])).toMatchObject({ ok: false, kind: 'secret_denied' });
    expect(checkSecrets(snap, 'constructor', ['GITHUB_TOKEN'])).toMatchObject({ ok: false, kind: 'secret_denied' });
  });
});

describe('clampBudget', () => {
  const snap = snapshotOf({
    budgets: {
      defaults: { timeout_ms: 5000, cpu_s: 5, output_cap: 4096 },
      ceilings: { timeout_ms: 60_000, cpu_s: 20, output_cap: 65_536 },
    },
  });

  it('gives the defaults when nothing is asked', () => {
    expect(clampBudget(snap)).toEqual({ budget: { timeout_ms: 5000, cpu_s: 5, output_cap: 4096, artifacts_bytes: 64 << 20 }, clamped: [] });
    expect(clampBudget(snap, {})).toEqual({
      budget: { timeout_ms: 5000, cpu_s: 5, output_cap: 4096, artifacts_bytes: 64 << 20 },
      clamped: [],
    });
    expect(clampBudget(snapshotOf())).toEqual({ budget: DEFAULT_POLICY.budgets.defaults, clamped: [] });
  });

  it('gives what is asked up to the ceiling, below the default too', () => {
    expect(clampBudget(snap, { timeout_ms: 60_000, cpu_s: 1 })).toEqual({
      budget: { timeout_ms: 60_000, cpu_s: 1, output_cap: 4096, artifacts_bytes: 64 << 20 },
      clamped: [],
    });
  });

  it('lowers each field above its ceiling and reports it', () => {
    expect(clampBudget(snap, { timeout_ms: 60_001, cpu_s: 10, output_cap: 1 << 30 })).toEqual({
      budget: { timeout_ms: 60_000, cpu_s: 10, output_cap: 65_536, artifacts_bytes: 64 << 20 },
      clamped: [
        { field: 'timeout_ms', requested: 60_001, applied: 60_000 },
        { field: 'output_cap', requested: 1 << 30, applied: 65_536 },
      ],
    });
  });

  it('ignores requests that are not positive safe integers', () => {
    for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
      expect(clampBudget(snap, { timeout_ms: bad, cpu_s: bad, output_cap: bad }), String(bad)).toEqual({
        budget: { timeout_ms: 5000, cpu_s: 5, output_cap: 4096, artifacts_bytes: 64 << 20 },
        clamped: [],
      });
    }
  });

  it('lowers artifacts_bytes above its ceiling and reports it, the bundle ceiling being 1 GiB', () => {
    const own = snapshotOf({ budgets: { defaults: { artifacts_bytes: 8192 }, ceilings: { artifacts_bytes: 1 << 20 } } });
    expect(clampBudget(own, { artifacts_bytes: (1 << 20) + 1 })).toEqual({
      budget: { timeout_ms: 30_000, cpu_s: 30, output_cap: 1 << 20, artifacts_bytes: 1 << 20 },
      clamped: [{ field: 'artifacts_bytes', requested: (1 << 20) + 1, applied: 1 << 20 }],
    });
    expect(clampBudget(own, { artifacts_bytes: 4096 })).toMatchObject({ budget: { artifacts_bytes: 4096 }, clamped: [] });
    expect(clampBudget(snapshotOf(), { artifacts_bytes: 2 ** 31 })).toMatchObject({
      budget: { artifacts_bytes: 1 << 30 },
      clamped: [{ field: 'artifacts_bytes', requested: 2 ** 31, applied: 1 << 30 }],
    });
  });

  it('does not change the snapshot', () => {
    clampBudget(snap, { cpu_s: 1 });
    expect(snap.policy.budgets.defaults.cpu_s).toBe(5);
  });
});

describe('bindRoots', () => {
  const snap = snapshotOf({
    bind_roots: ['~', '~/cache', '/srv/data/', `\${project}/out`, '/srv/data', `\${project}/../shared`, '/opt/./tools'],
  });

  it('expands ~ and the project token to absolute paths, in order, without duplicates', () => {
    expect(bindRoots(snap, { project: '/work/p', home: '/home/u' })).toEqual([
      '/work/p',
      '/home/u',
      '/home/u/cache',
      '/srv/data',
      '/work/p/out',
      '/work/shared',
      '/opt/tools',
    ]);
  });

  it('leaves out the project token’s entries when there is no project', () => {
    expect(bindRoots(snap, { home: '/home/u' })).toEqual(['/home/u', '/home/u/cache', '/srv/data', '/opt/tools']);
    expect(bindRoots(snapshotOf(), { home: '/home/u' })).toEqual([]);
  });

  it('uses the user’s home directory by default', () => {
    expect(bindRoots(snapshotOf({ bind_roots: ['~/x'] }), { project: '/p' })).toEqual(['/p', `${homedir()}/x`]);
  });
});

describe('checkRuntime', () => {
  it('allows the default runtimes', () => {
    const snap = snapshotOf();
    for (const r of ['python3', 'python3.12', 'python3.', 'node', 'bash', 'sh']) expect(checkRuntime(snap, r), r).toEqual(OK);
    for (const r of ['python', 'python3x', 'python2.7', 'nodejs', 'zsh', 'deno', 'bash ']) expect(checkRuntime(snap, r).ok, r).toBe(false);
    expect(denied(checkRuntime(snap, 'deno'), 'policy_denied')).toMatchInlineSnapshot(
      `"runtime "deno" is not allowed by policy runtimes.allow (python3, python3.*, node, bash, sh)"`,
    );
  });

  it('uses the list in force, which a document replaces', () => {
    const snap = snapshotOf({ runtimes: { allow: ['deno', 'ruby?'] } });
    expect(checkRuntime(snap, 'deno')).toEqual(OK);
    expect(checkRuntime(snap, 'ruby3')).toEqual(OK);
    expect(checkRuntime(snap, 'node').ok).toBe(false);
    expect(denied(checkRuntime(snapshotOf({ runtimes: { allow: [] } }), 'node'), 'policy_denied')).toMatchInlineSnapshot(
      `"runtime "node" is not allowed by policy runtimes.allow (none)"`,
    );
  });
});

describe('createSnapshot', () => {
  const HEX = /^sha256:[0-9a-f]{64}$/;

  it('is frozen and carries what it was given', () => {
    const policy = mergePolicies({ breakers: { per_tool_rpm: 5 } });
    const rules = rulesOf('allow a_t tool:x execute');
    const sources = [{ file: '/p.json', kind: 'policy' as const, status: 'loaded' as const }];
    const snap = createSnapshot(policy, rules, sources, 7);
    expect(snap).toEqual({ generation: 7, policy, rules, digest: expect.stringMatching(HEX), sources });
    expect(snap.policy).toBe(policy);
    expect(Object.isFrozen(snap)).toBe(true);
    expect(Object.isFrozen(snap.sources)).toBe(true);
    expect(createSnapshot(policy, null).generation).toBe(1);
    expect(createSnapshot(policy, null).sources).toEqual([]);
  });

  it('has the same digest for equal policies, however they were written or numbered', () => {
    const a = createSnapshot(mergePolicies({ breakers: { per_tool_rpm: 5, cooldown_s: 9 } }), null, [], 1);
    const b = createSnapshot(
      mergePolicies({ breakers: { cooldown_s: 9 } }, { breakers: { per_tool_rpm: 5 } }),
      null,
      [{ file: 'x', kind: 'policy', status: 'kept' }],
      42,
    );
    expect(b.digest).toBe(a.digest);
    expect(createSnapshot(mergePolicies(), null).digest).toBe(createSnapshot(DEFAULT_POLICY, null).digest);
    // Key order of per-persona maps does not matter either.
    const c = snapshotOf({ persona_namespaces: { a: 'x', b: 'y' } });
    const d = snapshotOf({ persona_namespaces: { b: 'y', a: 'x' } });
    expect(c.digest).toBe(d.digest);
  });

  it('has a different digest when the policy changes', () => {
    const a = snapshotOf({ breakers: { per_tool_rpm: 5 } });
    expect(snapshotOf({ breakers: { per_tool_rpm: 6 } }).digest).not.toBe(a.digest);
    expect(snapshotOf({ breakers: { per_tool_rpm: 5 }, forbidden_tool_names: ['x'] }).digest).not.toBe(a.digest);
    // Order matters where it is meaningful (lists).
    expect(snapshotOf({ runtimes: { allow: ['a', 'b'] } }).digest).not.toBe(snapshotOf({ runtimes: { allow: ['b', 'a'] } }).digest);
  });

  it('has a different digest when the rules change, and the same when only their text does', () => {
    const none = snapshotOf({});
    const empty = snapshotOf({}, '');
    const one = snapshotOf({}, 'allow a_t tool:x execute\nallow b_t tool:y execute');
    const same = snapshotOf({}, '# reordered\nallow b_t tool:y execute\r\n\nallow a_t tool:x execute\nallow a_t tool:x execute');
    const other = snapshotOf({}, 'allow a_t tool:x execute\nallow b_t tool:z execute');
    expect(new Set([none.digest, empty.digest, one.digest, other.digest]).size).toBe(4);
    expect(same.digest).toBe(one.digest);
  });
});

describe('bindAllow', () => {
  it('expands ~ and the project token to absolute paths, in order, without duplicates', () => {
    const snap = snapshotOf({
      bind_allow: ['~/.bashrc', `\${project}/.git`, '/srv/data/.envrc', '~/./.bashrc', `\${project}/.vscode/`],
    });
    expect(bindAllow(snap, { project: '/work/p', home: '/home/u' })).toEqual([
      '/home/u/.bashrc',
      '/work/p/.git',
      '/srv/data/.envrc',
      '/work/p/.vscode',
    ]);
    expect(bindAllow(snap, { home: '/home/u' })).toEqual(['/home/u/.bashrc', '/srv/data/.envrc']);
  });

  it('is empty by default, and independent of bind_roots', () => {
    expect(bindAllow(snapshotOf(), { project: '/work/p', home: '/home/u' })).toEqual([]);
    const snap = snapshotOf({ bind_roots: ['/srv'], bind_allow: ['/srv/.git'] });
    expect(bindRoots(snap, { home: '/home/u' })).toEqual(['/srv']);
    expect(bindAllow(snap, { home: '/home/u' })).toEqual(['/srv/.git']);
  });

  it('uses the user’s home directory by default', () => {
    expect(bindAllow(snapshotOf({ bind_allow: ['~/.zshrc'] }))).toEqual([`${homedir()}/.zshrc`]);
  });
});

describe('toolsmithFor and checkCapability', () => {
  it('is off, unpaused and direct by default', () => {
    const t = toolsmithFor(snapshotOf({}), 'agent');
    expect(t).toMatchObject({ enabled: false, paused: false, mode: 'direct', threshold: 3, windowMs: 24 * 3_600_000 });
    expect(t.pausedWhy).toBeUndefined();
  });

  it('lets an operator persona that is an approver approve in its client only when approve_in_client says so', () => {
    const on = { toolsmith: { approvers: ['ops', 'alice'], approve_in_client: true }, operator_personas: ['ops'] };
    expect(toolsmithFor(snapshotOf(on), 'ops').approvesInClient).toBe(true);
    expect(toolsmithFor(snapshotOf(on), 'alice').approvesInClient).toBe(false);
    expect(toolsmithFor(snapshotOf({ ...on, toolsmith: { ...on.toolsmith, approve_in_client: false } }), 'ops').approvesInClient).toBe(
      false,
    );
  });

  it('gives each persona its mode, `*` the others', () => {
    const snap = snapshotOf({ toolsmith: { enabled: true, mode: { '*': 'governed', coder: 'direct' } } });
    expect(toolsmithFor(snap, 'coder').mode).toBe('direct');
    expect(toolsmithFor(snap, 'agent').mode).toBe('governed');
  });

  it('is paused by the kill switch, and by a policy file kept at its last good version', () => {
    expect(toolsmithFor(snapshotOf({ toolsmith: { paused: true } }), 'a').pausedWhy).toMatch(/toolsmith\.paused is true/);
    const kept = createSnapshot(mergePolicies({ toolsmith: { enabled: true } }), null, [
      { file: '/p/.forge/policy.json', kind: 'policy', status: 'kept' },
    ]);
    const t = toolsmithFor(kept, 'a');
    expect(t.paused).toBe(true);
    expect(t.pausedWhy).toMatch(/\/p\/\.forge\/policy\.json failed to reload/);
  });

  it('allows only capabilities capability_allow covers, regardless of case; empty allows none', () => {
    expect(denied(checkCapability(snapshotOf({}), 'text.count'), 'policy_denied')).toMatch(/allows no capability.*"text\.\*"/);
    const snap = snapshotOf({ toolsmith: { capability_allow: ['text.*', 'csv_?'] } });
    expect(checkCapability(snap, 'TEXT.count').ok).toBe(true);
    expect(checkCapability(snap, 'csv_a').ok).toBe(true);
    expect(denied(checkCapability(snap, 'csv_ab'), 'policy_denied')).toMatch(
      /outside policy toolsmith\.capability_allow \("text\.\*", "csv_\?"\)/,
    );
  });
});
