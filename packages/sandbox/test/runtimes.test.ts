import { existsSync, mkdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { resolveRuntimes, runSandboxed, runtimeNames } from '../src/index.js';
import { requireSandbox, tempDir } from './helpers.js';

const PROGRAMS: Record<string, string[]> = {
  python3: ['-c', 'import sys; print("py", sys.version_info[0])'],
  node: ['-e', 'console.log("node", typeof process.version)'],
  bash: ['-c', 'echo bash $((6*7))'],
  sh: ['-c', 'echo sh ok'],
};

describe('runtimes', () => {
  beforeAll(requireSandbox);

  it('resolves python3, node, bash and sh to real interpreters', async () => {
    const table = await resolveRuntimes();
    for (const name of Object.keys(PROGRAMS)) {
      const r = table.get(name);
      expect(r.interpreter.startsWith('/')).toBe(true);
      expect(existsSync(r.interpreter)).toBe(true);
      // An interpreter under /usr needs no mount; one elsewhere brings the least it needs.
      if (r.interpreter.startsWith('/usr/')) expect(r.mounts).toEqual([]);
      for (const m of r.mounts) expect(existsSync(m)).toBe(true);
    }
  });

  it('skips what is not an executable file on PATH: a directory named bash, a bash without the x bit', async () => {
    const before = await resolveRuntimes();
    const real = before.get('bash').interpreter;
    const dirs = await tempDir();
    mkdirSync(join(dirs, 'a', 'bash'), { recursive: true });
    mkdirSync(join(dirs, 'b'));
    writeFileSync(join(dirs, 'b', 'bash'), '#!/bin/sh\n', { mode: 0o644 });
    const path = process.env.PATH;
    process.env.PATH = `${join(dirs, 'a')}:${join(dirs, 'b')}:${path}`;
    onTestFinished(async () => {
      process.env.PATH = path;
      await resolveRuntimes({ refresh: true });
    });
    const table = await resolveRuntimes({ refresh: true });
    expect(table.get('bash').interpreter).toBe(real);
    expect(statSync(realpathSync(table.get('bash').interpreter)).isFile()).toBe(true);
  });

  it('refuses an unknown runtime, listing the available ones', async () => {
    const table = await resolveRuntimes();
    expect(() => table.get('ruby')).toThrow(
      /unknown runtime "ruby": this host has .*python3.*; install the interpreter or pick one of those/,
    );
    try {
      table.get('ruby');
    } catch (err) {
      expect((err as { code?: string }).code).toBe('unknown_runtime');
    }
  });

  it.each(Object.keys(PROGRAMS))('%s runs inside the sandbox with only what it needs mounted', async (name) => {
    const r = (await resolveRuntimes()).get(name);
    const result = await runSandboxed({
      command: [r.interpreter, ...(PROGRAMS[name] as string[])],
      mounts: r.mounts.map((source) => ({ source, mode: 'ro' as const })),
      env: r.env,
    });
    expect({ reason: result.reason, exitCode: result.exitCode, stderr: result.stderrTail }).toEqual({
      reason: 'exit',
      exitCode: 0,
      stderr: '',
    });
    expect(result.stdout.toString()).toMatch(/^(py 3|node string|bash 42|sh ok)\n$/);
  });

  it('finds versioned python aliases on PATH on first use', async () => {
    const table = await resolveRuntimes({ refresh: true });
    const onPath = runtimeNames().filter((n) => /^python3\.\d+$/.test(n));
    expect(onPath.length).toBeGreaterThan(0);
    // Not asked before first use (no cache file here): the table starts with the base runtimes.
    expect(table.list.map((r) => r.name).filter((n) => /^python3\.\d+$/.test(n))).toEqual([]);
    expect(() => table.get(onPath[0] as string)).toThrow(/not looked up yet/);
    const versioned = await table.all();
    const aliases = versioned.filter((r) => /^python3\.\d+$/.test(r.name));
    expect(aliases.length).toBeGreaterThan(0);
    for (const r of aliases) {
      expect(r.version.startsWith(r.name.slice('python'.length))).toBe(true);
      expect(await table.resolve(r.name)).toBe(r);
      expect(table.get(r.name)).toBe(r);
    }
    // One that is on PATH but does not answer (a shim for a version not installed) is unknown, saying so.
    for (const n of onPath.filter((x) => !aliases.some((r) => r.name === x)))
      await expect(table.resolve(n)).rejects.toThrow(/on PATH but did not answer/);
    await expect(table.resolve('python2.1')).rejects.toThrow(/unknown runtime "python2.1"/);
  });
});

describe('the runtime cache file', () => {
  it('answers for an unchanged binary without asking it, and asks again when the binary differs (bash: an ELF binary, never a shim)', async () => {
    const dir = await tempDir();
    const cacheFile = join(dir, 'runtimes.json');
    const first = await resolveRuntimes({ refresh: true, cacheFile });
    const real = first.get('bash').version;
    expect(real).toMatch(/^\d+\.\d+/);
    const doc = JSON.parse(readFileSync(cacheFile, 'utf8'));
    expect(doc.version).toBe(2);
    expect(doc.entries.bash.runtime.version).toBe(real);
    // Mark the cached answer: if it comes back, the interpreter was not asked.
    doc.entries.bash.runtime.version = 'from-the-cache';
    writeFileSync(cacheFile, JSON.stringify(doc));
    expect((await resolveRuntimes({ refresh: true, cacheFile })).get('bash').version).toBe('from-the-cache');
    // The binary's identity no longer matches: asked again, and the file is corrected.
    doc.entries.bash.id = 'some-other-binary';
    writeFileSync(cacheFile, JSON.stringify(doc));
    expect((await resolveRuntimes({ refresh: true, cacheFile })).get('bash').version).toBe(real);
    expect(JSON.parse(readFileSync(cacheFile, 'utf8')).entries.bash.runtime.version).toBe(real);
    await resolveRuntimes({ refresh: true });
  });

  it("remembers a pyenv shim's answer under what picks its version, and asks again when that or the binary changes", async () => {
    const dir = await tempDir();
    const real = (await resolveRuntimes()).get('python3').interpreter;
    // A pyenv root as pyenv lays it out: a shim in its own words, and `pyenv exec`, which here
    // counts how often it is asked and runs the real interpreter.
    const root = join(dir, 'pyenv');
    const asked = join(dir, 'asked');
    mkdirSync(join(root, 'shims'), { recursive: true });
    mkdirSync(join(root, 'libexec'));
    const shim = [
      '#!/usr/bin/env bash',
      'set -e',
      '[ -n "$PYENV_DEBUG" ] && set -x',
      '',
      // biome-ignore lint/suspicious/noTemplateCurlyInString: the shim's own shell, not a template
      'program="${0##*/}"',
      '',
      `export PYENV_ROOT="${root}"`,
      `exec "${root}/libexec/pyenv" exec "$program" "$@"`,
      '',
    ].join('\n');
    writeFileSync(join(root, 'shims', 'python3'), shim, { mode: 0o755 });
    writeFileSync(join(root, 'libexec', 'pyenv'), `#!/bin/sh\necho x >> '${asked}'\nshift 2\nexec '${real}' "$@"\n`, { mode: 0o755 });
    writeFileSync(join(root, 'version'), '3.11.7\n');
    const count = () => (existsSync(asked) ? readFileSync(asked, 'utf8').split('\n').filter(Boolean).length : 0);
    const path = process.env.PATH;
    const { PYENV_VERSION: version, PYENV_DIR: from } = process.env;
    process.env.PATH = `${join(root, 'shims')}:${path}`;
    delete process.env.PYENV_VERSION;
    // Where pyenv looks for a .python-version first: here, none.
    process.env.PYENV_DIR = dir;
    onTestFinished(async () => {
      process.env.PATH = path;
      if (version !== undefined) process.env.PYENV_VERSION = version;
      if (from !== undefined) process.env.PYENV_DIR = from;
      else delete process.env.PYENV_DIR;
      await resolveRuntimes({ refresh: true });
    });
    const cacheFile = join(dir, 'runtimes.json');
    const resolve = async () => (await resolveRuntimes({ refresh: true, cacheFile })).get('python3').interpreter;
    expect(await resolve()).toBe(real);
    expect(count()).toBe(1);
    expect(await resolve()).toBe(real);
    expect(count(), 'the same shim, the same version file: not asked again').toBe(1);
    // A .python-version where pyenv looks, then another global version: asked again each time.
    writeFileSync(join(dir, '.python-version'), '3.11.7\n');
    await resolve();
    expect(count()).toBe(2);
    rmSync(join(dir, '.python-version'));
    await resolve();
    expect(count(), 'one answer is remembered per name: back to the global version file, asked again').toBe(3);
    writeFileSync(join(root, 'version'), '3.12.1\n');
    expect(await resolve()).toBe(real);
    expect(count()).toBe(4);
    // PYENV_VERSION, set in this shell: asked again, then remembered under it.
    process.env.PYENV_VERSION = '3.11.7';
    await resolve();
    await resolve();
    expect(count()).toBe(5);
    // The binary it named is not the one remembered any more: asked again.
    const doc = JSON.parse(readFileSync(cacheFile, 'utf8'));
    doc.entries.python3.target = 'some-other-binary';
    writeFileSync(cacheFile, JSON.stringify(doc));
    await resolve();
    expect(count()).toBe(6);
  });

  it('makes its own directory, but never recreates one above it that is gone (a removed home stays removed)', async () => {
    const dir = await tempDir();
    const made = join(dir, 'cache', 'runtimes.json');
    await resolveRuntimes({ refresh: true, cacheFile: made });
    expect(existsSync(made)).toBe(true);
    const gone = join(dir, 'home', 'cache', 'runtimes.json');
    await resolveRuntimes({ refresh: true, cacheFile: gone });
    expect(existsSync(join(dir, 'home'))).toBe(false);
    await resolveRuntimes({ refresh: true });
  });
});

describe('a busy host', () => {
  it('does not take an interpreter that answers too slowly for absent: it asks again on next use', async () => {
    const dir = await tempDir();
    const real = (await resolveRuntimes()).get('python3').interpreter;
    // A python3 that stalls until the host "calms down" (a file appears), then answers.
    const calm = join(dir, 'calm');
    mkdirSync(join(dir, 'bin'));
    writeFileSync(join(dir, 'bin', 'python3'), `#!/bin/sh\nwhile [ ! -e '${calm}' ]; do sleep 0.05; done\nexec '${real}' "$@"\n`, {
      mode: 0o755,
    });
    const path = process.env.PATH;
    process.env.PATH = `${join(dir, 'bin')}:${path}`;
    onTestFinished(async () => {
      process.env.PATH = path;
      await resolveRuntimes({ refresh: true });
    });
    const table = await resolveRuntimes({ refresh: true, answerTimeoutMs: 200 });
    expect(table.list.map((r) => r.name)).not.toContain('python3');
    await expect(table.resolve('python3')).rejects.toThrow(
      /unknown runtime "python3" \(it is on PATH but did not answer within 0.2 s, nor 0.6 s when asked again; the host may be overloaded: try again\)/,
    );
    writeFileSync(calm, '');
    expect((await table.resolve('python3')).interpreter).toBe(real);
    expect(table.list.map((r) => r.name)).toContain('python3');
  });
});

describe('node in the sandbox', () => {
  it('can use WebAssembly (and so fetch) under the address-space limit', async () => {
    const node = (await resolveRuntimes()).get('node');
    const r = await runSandboxed({
      command: [node.interpreter, '-e', 'const m = new WebAssembly.Memory({ initial: 1 }); console.log("wasm", m.buffer.byteLength)'],
      mounts: node.mounts.map((source) => ({ source, mode: 'ro' as const })),
      env: node.env,
    });
    expect(r.stdout.toString().trim(), r.stderrTail).toBe('wasm 65536');
  });
});
