// Invariant 3, host state a run touches is given back exactly, once (docs/security.md): as root,
// a rw bind is handed to the shared sandbox uid for the run; one run at a time holds an inode rw
// across every forge process of the host, and the last run out restores owner and mode; entries a
// run created come back without o+w or set-id bits.
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { waitFor } from '@forge/test-utils';
import { describe, expect } from 'vitest';
import { asRoot, asUser, CLI, cli, py, refused, scratch, target } from './helpers.js';

/** A tool that marks its bound directory `started`, waits (up to 25 s) for `go`, then writes its name. */
const holder = py(
  'holder',
  `import time
d = args["dir"]
open(os.path.join(d, "started-" + args["who"]), "w").close()
for _ in range(2500):
    if os.path.exists(os.path.join(d, "go")): break
    time.sleep(0.01)
open(os.path.join(d, args["who"] + ".txt"), "w").write(args["who"])
print(json.dumps({"ok": True, "data": "written"}))`,
  {
    input_schema: {
      type: 'object',
      properties: { dir: { type: 'string', 'x-bind': 'rw' }, who: { type: 'string', pattern: '^[a-z]+$' } },
      required: ['dir', 'who'],
    },
  },
);

describe('invariant 3: host state a run touches is given back exactly, once', () => {
  // As an ordinary user the sandbox runs as that user: nothing changes hands (the root pass runs the tests after it).
  asUser('as an ordinary user, a rw bind never changes owner or mode', async () => {
    const t = await target();
    const dir = join(t.project, 'shared');
    mkdirSync(dir, { mode: 0o755 });
    expect((await t.forge.forgeTool(holder)).ok).toBe(true);
    writeFileSync(join(dir, 'go'), '');
    expect((await t.forge.callTool('holder', { dir, who: 'a' })).ok).toBe(true);
    expect(statSync(dir)).toMatchObject({ uid: process.getuid?.(), mode: 0o40755 });
  });

  asRoot(
    'break 3: a second run’s rw bind of a directory another run holds is refused; the first finishes; owner and mode come back',
    async () => {
      const t = await target();
      const dir = join(t.project, 'shared');
      mkdirSync(dir, { mode: 0o755 });
      expect((await t.forge.forgeTool(holder)).ok).toBe(true);
      const first = t.forge.callTool('holder', { dir, who: 'a' });
      await waitFor('the first run to start', () => existsSync(join(dir, 'started-a')), { timeoutMs: 60_000 });
      const second = await t.forge.callTool('holder', { dir, who: 'b' });
      expect(refused(second, 'bind_denied').message).toContain('another run holds it read-write now');
      writeFileSync(join(dir, 'go'), '');
      const a = await first;
      expect(a.ok, JSON.stringify(a)).toBe(true);
      expect(readdirSync(dir).sort()).toEqual(['a.txt', 'go', 'started-a']);
      expect(statSync(dir)).toMatchObject({ uid: 0, gid: 0, mode: 0o40755 });
      // Free again: a later run takes it.
      expect((await t.forge.callTool('holder', { dir, who: 'c' })).ok).toBe(true);
      expect(statSync(dir)).toMatchObject({ uid: 0, gid: 0, mode: 0o40755 });
    },
  );

  asRoot('a tool’s chmod 2777 of its bound directory does not stay, and what it made comes back without set-id bits or o+w', async () => {
    const t = await target();
    const dir = join(t.project, 'out');
    mkdirSync(dir, { mode: 0o750 });
    const chmodder = py(
      'chmodder',
      `d = args["dir"]
os.chmod(d, 0o2777)
os.mkdir(os.path.join(d, "sub")); os.chmod(os.path.join(d, "sub"), 0o6777)
p = os.path.join(d, "sub", "run.sh"); open(p, "w").write("#!/bin/sh\\nid\\n"); os.chmod(p, 0o4777)
print(json.dumps({"ok": True, "data": "done"}))`,
      { input_schema: { type: 'object', properties: { dir: { type: 'string', 'x-bind': 'rw' } }, required: ['dir'] } },
    );
    expect((await t.forge.forgeTool(chmodder)).ok).toBe(true);
    const r = await t.forge.callTool('chmodder', { dir });
    expect(r.ok, JSON.stringify(r)).toBe(true);
    expect(statSync(dir)).toMatchObject({ uid: 0, mode: 0o40750 });
    expect(statSync(join(dir, 'sub')).mode & 0o7777).toBe(0o775);
    expect(statSync(join(dir, 'sub', 'run.sh')).mode & 0o7777).toBe(0o775);
    expect(statSync(join(dir, 'sub', 'run.sh')).uid).toBe(0);
  });

  asRoot(
    'a forge process killed mid-run leaves its lease; the next run takes it over and restores the owner and mode it recorded',
    async () => {
      const t = scratch();
      const dir = join(t.project, 'shared');
      mkdirSync(dir, { mode: 0o711 });
      chmodSync(dir, 0o711);
      expect((await cli(t, ['tools', 'forge', '-'], { input: JSON.stringify(holder) })).code).toBe(0);
      // A forge process holding the directory, killed -9 while its run waits.
      const child = spawn(process.execPath, [CLI, 'tools', 'call', 'holder', JSON.stringify({ dir, who: 'a' })], {
        cwd: t.project,
        env: { ...process.env, FORGE_HOME: t.home },
        stdio: 'ignore',
      });
      const exited = new Promise((r) => child.on('exit', r));
      await waitFor('the doomed run to start', () => existsSync(join(dir, 'started-a')), { timeoutMs: 60_000 });
      child.kill('SIGKILL');
      await exited;
      // Whatever the killed run's sandbox does now, the directory is not yet given back.
      writeFileSync(join(dir, 'go'), '');
      const next = await cli(t, ['tools', 'call', 'holder', JSON.stringify({ dir, who: 'b' })]);
      expect(next.code, next.stderr + next.stdout).toBe(0);
      expect(statSync(dir)).toMatchObject({ uid: 0, gid: 0, mode: 0o40711 });
    },
  );
});
