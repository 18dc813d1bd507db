/**
 * Warm Node interpreters: a Node run served by a sandbox whose interpreter is already running
 * (the loader required ahead of the main module, warm-node.ts) must give what the same run gives
 * in a sandbox built for it, as a CommonJS file and as an ES module, keep nothing from one run to
 * the next, and be held to its limits.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { type HostInfo, type Mount, probe, type RunOptions, type RunResult, runSandboxed, type SandboxProfile } from '../src/index.js';
import { builtSoon, describeRun, expectWarmAsCold, nodeRuntime, requireSandbox, stage } from './helpers.js';

let host: HostInfo;
let node: { interpreter: string; mounts: Mount[]; env: Record<string, string> };
beforeAll(async () => {
  await requireSandbox();
  host = await probe();
  node = await nodeRuntime();
});

/** A Node tool as forge runs one: its code a per-run file at /forge/tool/main.js, an artifacts directory. */
function tool(root: string, name: string, code: string, extra: Partial<SandboxProfile> = {}): SandboxProfile {
  const dir = join(root, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, 'artifacts'), { recursive: true });
  writeFileSync(join(dir, 'main.js'), code);
  return {
    command: [node.interpreter, '/forge/tool/main.js'],
    ...extra,
    env: { ...node.env, ...extra.env },
    mounts: [
      ...node.mounts,
      { source: join(dir, 'main.js'), target: '/forge/tool/main.js', mode: 'ro', perRun: true },
      { source: join(dir, 'artifacts'), target: '/forge/artifacts', mode: 'rw', perRun: true },
      ...(extra.mounts ?? []),
    ],
  };
}

const warmOptions = () => ({ env: node.env });

/** Runs `profile` warm: a first run of its shape has a warm sandbox built, the second must take it. */
async function warmRun(profile: () => SandboxProfile, stageDir: string, options: RunOptions = {}, preload?: string[]): Promise<RunResult> {
  const warm = { ...warmOptions(), ...(preload ? { preload } : {}) };
  const { stdin: _, events, ...rest } = options;
  await runSandboxed(profile(), { ...rest, ...(events ? { events: () => {} } : {}), prebuild: { stageDir, warm } });
  await builtSoon();
  const r = await runSandboxed(profile(), { ...options, prebuild: { stageDir, warm } });
  expect(r.warmup, `this run must have been served warm\n${describeRun(r)}`).toBeDefined();
  return r;
}

/** What a Node process sees of itself: environment, descriptors, ids, confinement, limits but the CPU one (see the limits test). */
const INTROSPECT = [
  "const fs = require('node:fs');",
  "console.log('env', JSON.stringify(Object.entries(process.env).sort()));",
  "console.log('cwd', process.cwd());",
  // Read before anything touches process.stdout, whose making sets O_NONBLOCK on a pipe.
  "fs.writeSync(1, 'flags ' + [0, 1, 2].map((f) => fs.readFileSync('/proc/self/fdinfo/' + f, 'utf8').match(/flags:\\s*(\\d+)/)[1]) + '\\n');",
  // (The directory's own descriptor is gone by the time its entry is read.)
  "const link = (f) => { try { return fs.readlinkSync('/proc/self/fd/' + f).replace(/[0-9]+/g, 'N'); } catch { return 'gone'; } };",
  // Node's own descriptors (its event loop's, its threads') are numbered past a warm one's
  // channel, which its loader then closes: of those past the tool's four, the kinds count.
  "const fds = fs.readdirSync('/proc/self/fd').map(Number).sort((a, b) => a - b);",
  "console.log('fds', fds.filter((f) => f < 4).map((f) => [f, link(f)]), fds.filter((f) => f >= 4).map(link).sort());",
  "const st = Object.fromEntries(fs.readFileSync('/proc/self/status', 'utf8').split('\\n').map((l) => l.split(':\\t')));",
  "console.log('ids', ['Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp'].map((k) => st[k]));",
  "console.log(fs.readFileSync('/proc/self/limits', 'utf8').split('\\n').filter((l) => !l.startsWith('Max cpu time')).join('\\n'));",
].join('\n');

/** Tools whose every observable must match cold and warm. */
const CORPUS: Record<string, { code: string; stdin?: string; expect: RegExp }> = {
  'CommonJS: main module, argv, file, module cache': {
    code: [
      'console.log(require.main === module, __filename, __dirname, module.id, module.loaded, module.children.length);',
      'console.log(JSON.stringify(process.argv), JSON.stringify(process.execArgv), JSON.stringify(Object.keys(require.cache)));',
      'console.log(JSON.stringify(module.paths), process.argv0, process.title);',
      "console.log(require('node:fs').readFileSync('/proc/self/cmdline', 'latin1').split('\\0').slice(1));",
    ].join('\n'),
    expect: /^true \/forge\/tool\/main\.js \/forge\/tool \. false 0\n.*\["\/forge\/tool\/main\.js"\]\n/,
  },
  'an ES module: import.meta, no require, top-level await': {
    code: [
      "import { readFileSync } from 'node:fs';",
      "const os = await import('node:os');",
      'console.log(import.meta.url, typeof require, typeof module, typeof os.cpus);',
      'console.log(JSON.stringify(process.argv), readFileSync(process.argv[1], "utf8").length);',
    ].join('\n'),
    expect: /^file:\/\/\/forge\/tool\/main\.js undefined undefined function\n/,
  },
  'stdin, stdout, stderr': {
    code: "const args = JSON.parse(require('node:fs').readFileSync(0, 'utf8'));\nconsole.log(JSON.stringify({ got: args }));\nconsole.error('to stderr');",
    stdin: '{"n": 3, "s": "ü"}',
    expect: /^\{"got":\{"n":3,"s":"ü"\}\}\n$/,
  },
  'environment, descriptors, limits, identity': {
    code: INTROSPECT,
    expect: /"TOOL_VAR","a \\"quoted\\"\\nvalue \$HOME"[\s\S]*\nflags \d+,\d+,\d+\n/,
  },
  'a child process inherits the environment and stdin': {
    code: "require('node:child_process').spawnSync('/bin/sh', ['-c', 'echo child $TOOL_VAR; cat'], { stdio: 'inherit' });",
    stdin: 'piped through\n',
    expect: /^child a "quoted" value \$HOME\npiped through\n$/,
  },
  'an uncaught exception in CommonJS: the same stack, exit 1': {
    code: "function f() {\n  throw new Error('boom');\n}\nconsole.log('before');\nf();\n",
    expect: /^before\n$/,
  },
  'an uncaught exception in an ES module': {
    code: "import 'node:fs';\nconsole.log('before');\nthrow new TypeError('esm boom');\n",
    expect: /^before\n$/,
  },
  'an unhandled rejection': {
    code: "Promise.reject(new Error('nobody caught me'));\nconsole.log('sync part');",
    expect: /^sync part\n$/,
  },
  'exit code, exit and beforeExit handlers, timers and promises that run before the exit': {
    code: [
      "process.on('beforeExit', (c) => console.log('beforeExit', c));",
      "process.on('exit', (c) => console.log('exit', c));",
      "setImmediate(() => Promise.resolve().then(() => console.log('later')));",
      'process.exitCode = 3;',
    ].join('\n'),
    expect: /^later\nbeforeExit 3\nexit 3\n$/,
  },
  'process.exit with a code past a byte': {
    code: "console.log('x');\nprocess.exit(Number(require('node:fs').readFileSync(0, 'utf8')));",
    stdin: '258',
    expect: /^x\n$/,
  },
  'a syntax error in the tool': {
    code: 'console.log("never"\n',
    expect: /^$/,
  },
  'artifacts and events': {
    code: "const fs = require('node:fs');\nfs.writeFileSync('/forge/artifacts/out.txt', 'made');\nfs.writeSync(3, '{\"progress\": 1}\\n');\nconsole.log(fs.readdirSync('/forge/artifacts'));",
    expect: /\[ 'out\.txt' \]/,
  },
};

describe('a warm Node run', () => {
  it.each(Object.entries(CORPUS))('gives what a cold run gives: %s', async (_name, c) => {
    const { stageDir, root } = await stage();
    const profile = () => tool(root, 'tool', c.code, { env: { TOOL_VAR: 'a "quoted"\nvalue $HOME' } });
    const cold = await expectWarmAsCold(profile, (p, o) => warmRun(p, stageDir, o), join(root, 'tool', 'artifacts'), c.stdin);
    expect(cold.stdout.toString(), describeRun(cold)).toMatch(c.expect);
  });

  it('finds nothing a previous warm run left: globals, module cache, files, environment', async () => {
    const { stageDir, root } = await stage();
    const code = [
      "const fs = require('node:fs');",
      "console.log('seen', globalThis.forgeMark, process.env.LEFT, fs.existsSync('/tmp/left'), Object.keys(require.cache).length);",
      "globalThis.forgeMark = 'set'; process.env.LEFT = '1'; fs.writeFileSync('/tmp/left', 'x');",
      "require.cache['/left'] = module;",
    ].join('\n');
    const first = await warmRun(() => tool(root, 'tool', code), stageDir);
    expect(first.stdout.toString(), describeRun(first)).toBe('seen undefined undefined false 1\n');
    for (let i = 0; i < 3; i++) {
      await builtSoon();
      const r = await runSandboxed(tool(root, 'tool', code), { prebuild: { stageDir, warm: warmOptions() } });
      expect(r.warmup, describeRun(r)).toBeDefined();
      expect(r.stdout.toString(), describeRun(r)).toBe('seen undefined undefined false 1\n');
    }
  });

  it('is held to its limits: cpu (its RLIMIT_CPU a second above the run, for the warm-up), wall clock, memory', async () => {
    const { stageDir, root } = await stage();
    const spin = () => tool(root, 'spin', 'for (;;) {}', { limits: { cpuSeconds: 1 } });
    const spinCold = await runSandboxed(spin());
    const spinWarm = await warmRun(spin, stageDir);
    expect(spinCold.reason, describeRun(spinCold)).toBe('cpu');
    expect(spinWarm.reason, describeRun(spinWarm)).toBe('cpu');
    const rl = () =>
      tool(
        root,
        'rl',
        "console.log(require('node:fs').readFileSync('/proc/self/limits', 'utf8').match(/Max cpu time +(\\d+) +(\\d+)/).slice(1).join(' '))",
        {
          limits: { cpuSeconds: 7 },
        },
      );
    expect((await runSandboxed(rl())).stdout.toString()).toBe('7 8\n');
    expect((await warmRun(rl, stageDir)).stdout.toString()).toBe('8 9\n');
    const slow = await warmRun(() => tool(root, 'slow', 'setInterval(() => {}, 1000);', { limits: { timeoutMs: 500 } }), stageDir);
    expect(slow.reason, describeRun(slow)).toBe('timeout');
    if (host.cgroups?.memory) {
      const hog = await warmRun(
        () =>
          tool(root, 'hog', 'const b = [];\nfor (;;) b.push(Buffer.alloc(1 << 20, 1));', {
            limits: { memoryBytes: 256 << 20, timeoutMs: 60_000 },
          }),
        stageDir,
      );
      expect(hog.reason, describeRun(hog)).toBe('memory');
    }
  });

  it('loads what the preload list names ahead, and skips a name it cannot load', async () => {
    const { stageDir, root } = await stage();
    const modules = join(root, 'node_modules', 'answer');
    mkdirSync(modules, { recursive: true });
    writeFileSync(join(modules, 'index.js'), 'module.exports = 42;');
    const extra = { mounts: [{ source: join(root, 'node_modules'), target: '/node_modules', mode: 'ro' as const }] };
    const code = "console.log('only this', Object.keys(require.cache).includes('/node_modules/answer/index.js'), require('answer'));";
    const r = await warmRun(() => tool(root, 'tool', code, extra), stageDir, {}, ['answer', 'node:zlib', 'not-installed-anywhere']);
    expect(r.stdout.toString(), describeRun(r)).toBe('only this true 42\n');
    expect(r.stderrTail).toBe('');
  });

  it('refuses a preload list that is not Node module names', async () => {
    const { stageDir, root } = await stage();
    await expect(
      runSandboxed(tool(root, 'tool', 'console.log(1)'), { prebuild: { stageDir, warm: { ...warmOptions(), preload: ["fs'); evil('"] } } }),
    ).rejects.toMatchObject({ code: 'invalid_profile', message: expect.stringContaining('is not a Node module name') });
  });

  it.each([
    ['with node options', [] as string[], {}, "[ '--no-warnings' ] undefined\n"],
    [
      'whose NODE_ variables are not those the interpreter would start with',
      undefined,
      { NODE_PATH: '/opt/elsewhere' },
      '[] /opt/elsewhere\n',
    ],
  ])('a run %s is served by a sandbox built ahead, cold', async (_name, options, env, expected) => {
    const { stageDir, root } = await stage();
    const profile = () => {
      const p = tool(root, 'tool', 'console.log(process.execArgv, process.env.NODE_PATH)', { env });
      return options ? { ...p, command: [node.interpreter, '--no-warnings', '/forge/tool/main.js'] } : p;
    };
    await runSandboxed(profile(), { prebuild: { stageDir, warm: warmOptions() } });
    await builtSoon();
    const r = await runSandboxed(profile(), { prebuild: { stageDir, warm: warmOptions() } });
    expect(r.prebuilt, describeRun(r)).toBe(true);
    expect(r.warmup).toBeUndefined();
    expect(r.stdout.toString()).toBe(expected);
  });
});
