import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  compileToolSchema,
  createRegistry,
  digestSpec,
  isValidToolName,
  type StoredTool,
  toolNameProblem,
  toolValidators,
  validateSpec,
  verifyToolDigest,
} from '../src/index.js';
import { BUILTINS, spec } from './helpers.js';

function problems(value: unknown, runtimes?: string[]) {
  const r = validateSpec(value, runtimes ? { runtimes } : {});
  if (r.ok) throw new Error('expected validation_failed');
  expect(r.kind).toBe('validation_failed');
  return r;
}

describe('validateSpec', () => {
  it('accepts a valid spec and returns it without stamps, with its digest', () => {
    const s = spec();
    const r = validateSpec({ ...s, version: 7, digest: `sha256:${'0'.repeat(64)}`, state: 'active', scope: 'user' });
    expect(r).toEqual({ ok: true, spec: s, digest: digestSpec(s) });
  });

  it('refuses a value that is not an object', () => {
    for (const v of [null, 'x', 3, []]) expect(problems(v).problems[0]?.path).toBe('');
  });

  it('names every missing field and refuses unknown ones', () => {
    const { description: _, ...rest } = spec();
    expect(problems({ ...rest, colour: 'blue' }).message).toMatchInlineSnapshot(
      `"spec: must have required property 'description'; spec: must NOT have the property "colour"; remove it or check its spelling"`,
    );
  });

  it('accepts MCP annotation overrides in meta.annotations, and only their known hints', () => {
    const hints = { title: 'Plot', readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true };
    expect(validateSpec(spec({ meta: { annotations: hints } })).ok).toBe(true);
    expect(problems(spec({ meta: { annotations: { readOnly: true } as never } })).problems.map((p) => p.path)).toEqual([
      'meta/annotations',
    ]);
    expect(problems(spec({ meta: { annotations: { openWorldHint: 'no' } as never } })).problems.map((p) => p.path)).toEqual([
      'meta/annotations/openWorldHint',
    ]);
  });

  it('checks the types of meta and examples with pointers', () => {
    const r = problems(spec({ meta: { timeout_ms: -5, secrets: ['GH_TOKEN', 'GH_TOKEN'] } }));
    expect(r.problems.map((p) => p.path)).toEqual(['meta/secrets', 'meta/timeout_ms']);
  });

  describe('name grammar', () => {
    const good = ['a', 'Z', 'csv_filter', 'code.csv_filter', 'a.b.c', 'a-b', 'a_', 'a.-b', 'A1', `a${'b'.repeat(63)}`];
    const bad: Array<[string, string]> = [
      ['', 'must not be empty'],
      ['1abc', 'must start with a letter'],
      ['_abc', 'must start with a letter'],
      ['-abc', 'must start with a letter'],
      ['.abc', 'must start with a letter'],
      ['abc.', 'must not end with "."'],
      ['a..b', 'must not contain ".."'],
      ['a/b', 'may only hold'],
      ['a b', 'may only hold'],
      ['é', 'may only hold'],
      ['a\u0000', 'may only hold'],
      [`a${'b'.repeat(64)}`, 'must be at most 64 bytes (got 65)'],
    ];
    it.each(good)('accepts %j', (name) => {
      expect(toolNameProblem(name)).toBeUndefined();
      expect(isValidToolName(name)).toBe(true);
      expect(validateSpec(spec({ name })).ok).toBe(true);
    });
    it.each(bad)('refuses %j', (name, why) => {
      expect(toolNameProblem(name)).toContain(why);
      const r = problems(spec({ name }));
      expect(r.problems).toHaveLength(1);
      expect(r.message).toContain(`name: ${why}`);
    });
    it('agrees with the published schema pattern on every case', async () => {
      const { default: schema } = await import('../schema/tool-spec.schema.json', { with: { type: 'json' } });
      const re = new RegExp(schema.properties.name.pattern, 'u');
      for (const name of good) expect(re.test(name) && name.length <= 64).toBe(true);
      for (const [name] of bad) expect(re.test(name) && name.length <= 64).toBe(false);
    });
  });

  describe('runtime', () => {
    it('refuses an unknown runtime and lists the known ones', () => {
      expect(problems(spec({ runtime: 'ruby' })).message).toMatchInlineSnapshot(
        `"runtime: "ruby" is not a known runtime; use one of: python3, node, bash, sh"`,
      );
    });
    it('uses the caller-provided runtime list', () => {
      expect(validateSpec(spec({ runtime: 'python3.11' }), { runtimes: ['python3', 'python3.11'] }).ok).toBe(true);
      expect(problems(spec({ runtime: 'node' }), ['python3']).message).toContain('use one of: python3');
    });
  });

  describe('input_schema and output_schema', () => {
    it('names the JSON pointer of a schema that does not compile', () => {
      const r = problems(spec({ input_schema: { type: 'object', properties: { n: { type: 'strng' } } } }));
      expect(r.problems).toEqual([
        {
          path: 'input_schema/properties/n/type',
          message: 'must be equal to one of the allowed values ("array", "boolean", "integer", "null", "number", "object", "string")',
        },
      ]);
      expect(r.message.startsWith('input_schema/properties/n/type: must be equal to one of the allowed values')).toBe(true);
    });

    it('requires input_schema to describe an object', () => {
      expect(problems(spec({ input_schema: { type: 'array', items: { type: 'string' } } })).message).toMatchInlineSnapshot(
        `"input_schema/type: must be "object": a tool's input is a JSON object of named arguments (got "array")"`,
      );
      expect(problems(spec({ input_schema: { properties: {} } })).problems[0]?.path).toBe('input_schema/type');
    });

    it('uses 2020-12 by default and draft-07 when $schema says so', () => {
      // Array-form `items` is a tuple in draft-07 and a schema error in 2020-12.
      const tuple = { type: 'object', properties: { pair: { type: 'array', items: [{ type: 'string' }, { type: 'integer' }] } } };
      expect(problems(spec({ input_schema: tuple })).problems[0]?.path).toBe('input_schema/properties/pair/items');
      for (const id of [
        'http://json-schema.org/draft-07/schema#',
        'http://json-schema.org/draft-07/schema',
        'https://json-schema.org/draft-07/schema#',
      ]) {
        const r = validateSpec(spec({ input_schema: { $schema: id, ...tuple } }));
        expect(r.ok).toBe(true);
      }
      const explicit = {
        $schema: 'https://json-schema.org/draft/2020-12/schema',
        ...tuple,
        properties: { pair: { type: 'array', prefixItems: [{ type: 'string' }] } },
      };
      expect(validateSpec(spec({ input_schema: explicit })).ok).toBe(true);
      // draft-07 semantics hold when validating: the tuple's second item must be an integer.
      const c = compileToolSchema({ $schema: 'http://json-schema.org/draft-07/schema#', ...tuple });
      if (!c.ok) throw new Error(c.message);
      expect(c.dialect).toBe('draft-07');
      expect(c.validate({ pair: ['a', 'b'] })).toMatchObject({ ok: false, message: 'input/pair/1: must be integer' });
    });

    it('refuses an unknown $schema and says which ones work', () => {
      for (const id of [
        'https://json-schema.org/draft/2019-09/schema',
        'http://json-schema.org/draft-04/schema#',
        'https://example.com/mine',
        42,
      ]) {
        const r = problems(spec({ input_schema: { $schema: id, type: 'object' } }));
        expect(r.problems[0]?.path).toBe('input_schema/$schema');
        expect(r.message).toContain('use "https://json-schema.org/draft/2020-12/schema"');
      }
    });

    it('reports an output_schema that does not compile', () => {
      const r = problems(spec({ output_schema: { type: 'object', properties: { a: { $ref: '#/$defs/missing' } } } }));
      expect(r.problems).toHaveLength(1);
      expect(r.problems[0]?.path).toBe('output_schema');
      expect(r.message).toContain("can't resolve reference #/$defs/missing");
      expect(problems(spec({ output_schema: { type: 'string', minLength: -1 } })).problems[0]?.path).toBe('output_schema/minLength');
      expect(problems(spec({ input_schema: { type: 'object', properties: { s: { type: 'string', pattern: '(' } } } })).message).toContain(
        'input_schema: does not compile: Invalid regular expression',
      );
      expect(validateSpec(spec({ output_schema: { type: 'integer' } })).ok).toBe(true);
    });

    it('refuses a remote $ref instead of fetching it', () => {
      const r = problems(spec({ input_schema: { type: 'object', properties: { a: { $ref: 'https://example.com/a.json' } } } }));
      expect(r.message).toContain("can't resolve reference https://example.com/a.json");
    });

    it('accepts x-bind and x-redact where they belong and names misplaced ones', () => {
      const ok = {
        type: 'object',
        properties: {
          src: { type: 'string', 'x-bind': 'ro' },
          out: { type: ['string', 'null'], 'x-bind': 'rw' },
          token: { type: 'string', 'x-redact': true },
          list: { type: 'array', items: { type: 'string', 'x-bind': 'ro' } },
          'x-bind': { type: 'integer' },
        },
      };
      expect(validateSpec(spec({ input_schema: ok })).ok).toBe(true);
      const bad = {
        type: 'object',
        properties: {
          a: { type: 'string', 'x-bind': 'rx' },
          b: { type: 'integer', 'x-bind': 'ro' },
          c: { type: 'string', 'x-redact': 'yes' },
        },
        $defs: { d: { type: 'string', 'x-bind': true } },
      };
      expect(problems(spec({ input_schema: bad })).problems).toEqual([
        { path: 'input_schema/properties/a/x-bind', message: 'must be "ro" or "rw" (got "rx")' },
        {
          path: 'input_schema/properties/b/x-bind',
          message: 'may only mark a string property (its value is a host path); add "type": "string"',
        },
        { path: 'input_schema/properties/c/x-redact', message: 'must be true or false (got "yes")' },
        { path: 'input_schema/$defs/d/x-bind', message: 'must be "ro" or "rw" (got true)' },
      ]);
    });

    it('ignores unknown keywords and formats, and checks the formats it knows', () => {
      const s = {
        type: 'object',
        properties: { e: { type: 'string', format: 'email' }, w: { type: 'string', format: 'wibble', 'x-ui': 'big' } },
      };
      expect(validateSpec(spec({ input_schema: s })).ok).toBe(true);
      const c = compileToolSchema(s);
      if (!c.ok) throw new Error(c.message);
      expect(c.validate({ e: 'a@b.example', w: 'anything' })).toEqual({ ok: true });
      expect(c.validate({ e: 'nope' })).toMatchObject({
        ok: false,
        kind: 'validation_failed',
        message: 'input/e: must match format "email"',
      });
    });

    it('compiles schemas that share an $id independently', () => {
      const a = compileToolSchema({ $id: 'https://example.com/t', type: 'object', required: ['a'] });
      const b = compileToolSchema({ $id: 'https://example.com/t', type: 'object', required: ['b'] });
      if (!a.ok || !b.ok) throw new Error('compile failed');
      expect(a.validate({ a: 1 }).ok).toBe(true);
      expect(b.validate({ a: 1 }).ok).toBe(false);
    });
  });

  it("checks every example's input against input_schema", () => {
    const r = problems(spec({ examples: [{ input: { path: '/data/a.csv' } }, { input: { path: 3, extra: true } }] }));
    expect(r.problems).toEqual([
      { path: 'examples/1/input', message: 'must NOT have the property "extra"; remove it or check its spelling' },
      { path: 'examples/1/input/path', message: 'must be string' },
    ]);
  });

  it('refuses a built-in name through the registry (name_forbidden)', () => {
    const registry = createRegistry({ roots: { user: '/nonexistent/forge/tools' }, builtins: BUILTINS });
    expect(registry.validate(spec({ name: 'forge_tool' }))).toMatchObject({ ok: false, kind: 'name_forbidden' });
    expect(registry.validate(spec({ name: 'forge_tool2' })).ok).toBe(true);
  });

  it('asks runtimes given as a function at each validation, not at creation', () => {
    let names: readonly string[] | undefined;
    let asked = 0;
    const registry = createRegistry({
      roots: { user: '/nonexistent/forge/tools' },
      runtimes: () => {
        asked++;
        if (!names) throw new Error('asked too early');
        return names;
      },
    });
    expect(asked).toBe(0);
    names = ['python3'];
    expect(registry.validate(spec({ runtime: 'python3.11' }))).toMatchObject({ ok: false, kind: 'validation_failed' });
    names = ['python3', 'python3.11'];
    expect(registry.validate(spec({ runtime: 'python3.11' })).ok).toBe(true);
    expect(asked).toBe(2);
  });
});

describe('digestSpec', () => {
  const base = spec({ meta: { deterministic: true, timeout_ms: 1000 }, output_schema: { type: 'integer' } });

  it('is sha256 over the canonical JSON with sorted keys', () => {
    const canonical =
      '{"description":"Counts the rows of a CSV file.","impl":' +
      JSON.stringify(base.impl) +
      ',"input_schema":{"additionalProperties":false,"properties":{"header":{"type":"boolean"},"path":{"type":"string","x-bind":"ro"}},"required":["path"],"type":"object"},"meta":{"deterministic":true,"timeout_ms":1000},"name":"csv.count","output_schema":{"type":"integer"},"runtime":"python3"}';
    expect(digestSpec(base)).toBe(`sha256:${createHash('sha256').update(canonical).digest('hex')}`);
  });

  it('does not depend on key order at any depth', () => {
    const reordered = JSON.parse(
      JSON.stringify({
        runtime: base.runtime,
        output_schema: base.output_schema,
        meta: { timeout_ms: 1000, deterministic: true },
        name: base.name,
        input_schema: {
          required: ['path'],
          type: 'object',
          additionalProperties: false,
          properties: { header: { type: 'boolean' }, path: { 'x-bind': 'ro', type: 'string' } },
        },
        impl: base.impl,
        description: base.description,
      }),
    );
    expect(digestSpec(reordered)).toBe(digestSpec(base));
  });

  it('excludes every stamp, and changes with any content', () => {
    const stamped = {
      ...base,
      version: 3,
      digest: 'sha256:x',
      created_at: '2030-01-01T00:00:00.000Z',
      created_by: { persona: 'p', session: 's' },
      scope: 'user',
      state: 'retired',
      origin: { project: '/p', digest: 'sha256:y' },
    };
    expect(digestSpec(stamped)).toBe(digestSpec(base));
    expect(digestSpec({ ...base, impl: `${base.impl} ` })).not.toBe(digestSpec(base));
    expect(digestSpec({ ...base, meta: { deterministic: false, timeout_ms: 1000 } })).not.toBe(digestSpec(base));
  });

  it('verifyToolDigest detects an edited tool', () => {
    const tool = {
      ...base,
      version: 1,
      digest: digestSpec(base),
      created_at: '2030-01-01T00:00:00.000Z',
      created_by: { persona: 'p', session: 's' },
      scope: 'project',
      state: 'active',
    } as StoredTool;
    expect(verifyToolDigest(tool)).toEqual({ ok: true });
    const edited = { ...tool, impl: 'import os\n' };
    expect(verifyToolDigest(edited)).toMatchObject({ ok: false, kind: 'tool_tampered', expected: tool.digest, actual: digestSpec(edited) });
  });
});

describe('toolValidators', () => {
  it('compiles once per digest and validates input and output with pointer paths', () => {
    const s = spec({ output_schema: { type: 'object', properties: { rows: { type: 'integer', minimum: 0 } }, required: ['rows'] } });
    const tool = { ...s, digest: digestSpec(s) };
    const v = toolValidators(tool);
    expect(toolValidators(tool)).toBe(v);
    if (!('input' in v)) throw new Error(v.message);
    expect(v.input({ path: '/x' })).toEqual({ ok: true });
    expect(v.input({})).toMatchObject({ message: "input: must have required property 'path'" });
    expect(v.output?.({ rows: -1 })).toMatchObject({ ok: false, problems: [{ path: 'output/rows', message: 'must be >= 0' }] });
  });

  it('returns validation_failed for a stored schema that no longer compiles', () => {
    const s = spec({ input_schema: { type: 'object', properties: { n: { type: 'strng' } } } });
    expect(toolValidators({ ...s, digest: digestSpec(s) })).toMatchObject({ ok: false, kind: 'validation_failed' });
  });
});

describe('annotations where the runner cannot find them', () => {
  it('refuses x-bind and x-redact under keywords the call pipeline does not follow', () => {
    const bad = validateSpec(
      spec({
        input_schema: {
          type: 'object',
          patternProperties: { '^secret_': { type: 'string', 'x-redact': true } },
          // (if/then/else are not followed either; `not` stands for them here.)
          not: { properties: { path: { type: 'string', 'x-bind': 'ro' } } },
        },
      }),
    );
    expect(bad.ok).toBe(false);
    if (!bad.ok) {
      expect(bad.problems.map((p) => p.path).sort()).toEqual([
        'input_schema/not/properties/path/x-bind',
        'input_schema/patternProperties/^secret_/x-redact',
      ]);
      expect(bad.problems[0]?.message).toMatch(/is not read under "(patternProperties|not)"/);
    }
  });

  it('accepts them through properties, items, allOf/anyOf/oneOf and $defs', () => {
    const ok = validateSpec(
      spec({
        input_schema: {
          type: 'object',
          properties: {
            files: { type: 'array', items: { type: 'string', 'x-bind': 'ro' } },
            token: { anyOf: [{ $ref: '#/$defs/secret' }, { type: 'null' }] },
          },
          additionalProperties: { type: 'string', 'x-redact': true },
          $defs: { secret: { type: 'string', 'x-redact': true } },
        },
      }),
    );
    expect(ok.ok).toBe(true);
  });
});
