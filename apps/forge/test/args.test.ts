import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { envFromFlags, parseCommand, parseListen, parseTokens, UsageError } from '../src/args.js';
import { readInput, readSpec } from '../src/spec-input.js';

describe('argument parsing', () => {
  const spec = { usage: 'forge tools call <name> [<json>|-]', summary: '', positionals: [1, 2] as [number, number] };

  it('names the missing argument, the unknown option and the extra argument', () => {
    expect(() => parseCommand(spec, [])).toThrow('missing argument <name>');
    expect(() => parseCommand(spec, ['fib', '--nope'])).toThrow('unknown option --nope');
    expect(() => parseCommand(spec, ['a', 'b', 'c'])).toThrow('unexpected argument "c"');
    expect(parseCommand(spec, ['fib', '{}', '--json'])).toMatchObject({ positionals: ['fib', '{}'], values: { json: true } });
  });

  it('maps configuring flags onto their environment variables', () => {
    const env = envFromFlags({ home: '/h', persona: 'ann', 'allowed-tools': 'a,b' }, { FORGE_PERSONA: 'bob', PATH: '/bin' });
    expect(env).toMatchObject({ FORGE_HOME: '/h', FORGE_PERSONA: 'ann', FORGE_ALLOWED_TOOLS: 'a,b', PATH: '/bin' });
  });

  it('parses --http and --token', () => {
    expect(parseListen('8080')).toEqual({ host: '127.0.0.1', port: 8080 });
    expect(parseListen('0.0.0.0:0')).toEqual({ host: '0.0.0.0', port: 0 });
    expect(parseListen('[::1]:9000')).toEqual({ host: '::1', port: 9000 });
    expect(() => parseListen('host:99999')).toThrow(UsageError);
    expect(parseTokens(['secret-token=ann', 'other=bob:fib,csv_stats'])).toEqual({
      'secret-token': { persona: 'ann' },
      other: { persona: 'bob', allowedTools: 'fib,csv_stats' },
    });
    expect(() => parseTokens(['=ann'])).toThrow(UsageError);
    expect(() => parseTokens(['tok=1bad'])).toThrow('not a persona name');
  });
});

describe('specs and inputs from the command line', () => {
  const dir = () => {
    const d = mkdtempSync(join(tmpdir(), 'forge-args-test-'));
    onTestFinished(() => rmSync(d, { recursive: true, force: true }));
    return d;
  };

  it('reads a directory (tool.json + main.*), a file with main.* beside it, and stdin', async () => {
    const d = dir();
    mkdirSync(join(d, 't'));
    writeFileSync(join(d, 't', 'tool.json'), '{"name": "t", "runtime": "bash"}');
    writeFileSync(join(d, 't', 'main.sh'), 'echo hi');
    expect(await readSpec(join(d, 't'))).toEqual({ name: 't', runtime: 'bash', impl: 'echo hi' });
    expect(await readSpec(join(d, 't', 'tool.json'))).toEqual({ name: 't', runtime: 'bash', impl: 'echo hi' });
    expect(await readSpec('-', async () => '{"name": "s", "impl": "x"}')).toEqual({ name: 's', impl: 'x' });
    await expect(readSpec('-', async () => '{oops')).rejects.toThrow(/the spec on stdin is not valid JSON/);
    await expect(readSpec(join(d, 'missing'))).rejects.toThrow(/no such file or directory/);
    writeFileSync(join(d, 't', 'main.py'), 'print()');
    await expect(readSpec(join(d, 't'))).rejects.toThrow(/keep one main\.\*/);
  });

  it('reads an input: JSON text, stdin, or nothing for {}', async () => {
    expect(await readInput(undefined)).toEqual({});
    expect(await readInput('{"n": 1}')).toEqual({ n: 1 });
    expect(await readInput('-', async () => '[1]')).toEqual([1]);
    await expect(readInput('{n:1}')).rejects.toThrow(/the input is not valid JSON/);
  });
});
