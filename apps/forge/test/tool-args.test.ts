import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { UsageError } from '../src/args.js';
import { flagsOf, inputFromArgs, toolHelp, usageOf } from '../src/tool-args.js';

const noStdin = () => Promise.reject(new Error('stdin must not be read'));
const parse = (schema: unknown, args: string[]) => inputFromArgs('t', schema, args, noStdin, true);

/** A flat schema and an input it describes: properties of each scalar type, some arrays. */
const flatCase = fc
  .uniqueArray(
    fc.record({
      name: fc.stringMatching(/^[a-z][a-z0-9_]{0,11}$/).filter((n) => n !== 'json' && n !== 'help' && !n.startsWith('no_')),
      type: fc.constantFrom('string', 'number', 'integer', 'boolean'),
      array: fc.boolean(),
    }),
    { selector: (p) => p.name, maxLength: 6 },
  )
  .chain((props) =>
    fc.tuple(
      fc.constant(props),
      fc.tuple(
        ...props.map((p) => {
          const one: fc.Arbitrary<unknown> =
            p.type === 'string'
              ? fc.string({ maxLength: 12 })
              : p.type === 'integer'
                ? fc.integer({ min: -1e9, max: 1e9 })
                : p.type === 'number'
                  ? fc.double({ noNaN: true, noDefaultInfinity: true, min: -1e6, max: 1e6 }).map((x) => (Object.is(x, -0) ? 0 : x))
                  : fc.boolean();
          const value: fc.Arbitrary<unknown> = p.array ? fc.array(one, { minLength: 1, maxLength: 3 }) : one;
          return fc.option(value, { nil: undefined });
        }),
      ),
    ),
  );

describe('a tool from the command line (terminal mode)', () => {
  it('flags built from any input of a flat schema parse back to that input', async () => {
    await fc.assert(
      fc.asyncProperty(flatCase, fc.boolean(), async ([props, values], kebab) => {
        const schema = {
          type: 'object',
          properties: Object.fromEntries(
            props.map((p) => [p.name, p.array ? { type: 'array', items: { type: p.type } } : { type: p.type }]),
          ),
        };
        const input: Record<string, unknown> = {};
        const args: string[] = [];
        props.forEach((p, i) => {
          const v = values[i];
          if (v === undefined) return;
          input[p.name] = v;
          const flag = `--${kebab ? p.name.replaceAll('_', '-') : p.name}`;
          for (const one of Array.isArray(v) ? v : [v]) {
            if (p.type === 'boolean' && !p.array) args.push(one ? flag : `--no-${flag.slice(2)}`);
            // `--x=value` keeps a value that starts with "-" or is empty from being read as a flag.
            else args.push(`${flag}=${String(one)}`);
          }
        });
        const got = await parse(schema, args);
        expect(got).toEqual({ input });
      }),
      { numRuns: 300 },
    );
  });

  it('JSON as the one argument, on stdin, or nothing at all', async () => {
    expect(await parse({}, ['{"a": [1, {"b": null}]}'])).toEqual({ input: { a: [1, { b: null }] } });
    expect(await inputFromArgs('t', {}, [], async () => ' {"n": 1}\n', false)).toEqual({ input: { n: 1 } });
    expect(await inputFromArgs('t', {}, [], async () => '', false)).toEqual({ input: {} });
    expect(await inputFromArgs('t', {}, ['-'], async () => '[1]', true)).toEqual({ input: [1] });
    expect(await parse({}, [])).toEqual({ input: {} });
    expect(await parse({ type: 'object', properties: { n: { type: 'integer' } } }, ['--help'])).toEqual({ help: true });
  });

  it('each mistake is a usage error naming the flag, the value and what it takes', async () => {
    const schema = {
      type: 'object',
      properties: { n: { type: 'integer' }, ok: { type: 'boolean' }, tags: { type: 'array', items: { type: 'string' } } },
      required: ['n'],
    };
    const cases: [string[], RegExp][] = [
      [['--m', '1'], /unknown flag --m \(it takes --n, --ok, --tags\)/],
      [['--n'], /--n needs a value \(integer\)/],
      [['--n', '1.5'], /--n expects an integer \(got "1.5"\)/],
      [['--n', ''], /--n expects an integer \(got ""\)/],
      [['--n', '1', '--n', '2'], /--n given twice/],
      [['--ok=maybe'], /--ok is true or false \(got "maybe"\)/],
      [['5'], /unexpected argument "5": give flags/],
      [['{"n":1}', 'x'], /after the JSON input, unexpected argument "x"/],
      [['{"n":'], /the input of t is not valid JSON/],
    ];
    for (const [args, re] of cases) {
      const err = await parse(schema, args).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err, args.join(' ')).toBeInstanceOf(UsageError);
      expect((err as Error).message, args.join(' ')).toMatch(re);
    }
    const nested = { type: 'object', properties: { opts: { type: 'object' } } };
    await expect(parse(nested, ['--opts', 'x'])).rejects.toThrow(
      /takes no flags: its property "opts" is not a string.*give its input as JSON/,
    );
    expect(flagsOf(nested).ok).toBe(false);
  });

  it('--help is generated from the schema; its text is left for the output to make inert', () => {
    const schema = {
      type: 'object',
      properties: {
        n: { type: 'integer', description: 'which one' },
        mode: { enum: ['fast', 'slow'], default: 'fast' },
        tags: { type: 'array', items: { type: 'string' } },
        ok: { type: ['boolean', 'null'] },
      },
      required: ['n'],
    };
    expect(usageOf('t', schema)).toBe('t --n <integer> [--mode <string>] [--tags <string>…] [--ok]');
    const help = toolHelp('t', 'Does t.', schema).join('\n');
    expect(help).toContain('--n  (integer; required) which one');
    expect(help).toContain('--mode  (string; one of "fast", "slow"; default "fast")');
    expect(help).toContain('--tags  (string, repeat for more)');
  });
});
