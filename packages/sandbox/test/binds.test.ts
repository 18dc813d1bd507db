import { execFileSync, spawn } from 'node:child_process';
import { existsSync, linkSync, mkdirSync, readdirSync, readlinkSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type BindCheck, checkBind, closeBinds } from '../src/index.js';
import { isRoot, tempDir } from './helpers.js';

function denied(r: BindCheck): string {
  expect(r.ok).toBe(false);
  if (r.ok) {
    closeBinds([r.bind]);
    return '';
  }
  expect(r.code).toBe('bind_denied');
  return r.message;
}

describe('checkBind', () => {
  it('accepts a file and a directory inside a root, holding each open by an O_PATH descriptor', async () => {
    const root = await tempDir();
    writeFileSync(join(root, 'data.csv'), 'a,b\n');
    mkdirSync(join(root, 'out'));
    const f = checkBind({ path: join(root, 'data.csv') }, { roots: [root], deny: [] });
    const d = checkBind({ path: join(root, 'out'), mode: 'rw' }, { roots: [root], deny: [] });
    if (!f.ok || !d.ok) throw new Error('expected both binds to pass');
    onTestFinished(() => closeBinds([f.bind, d.bind]));
    expect(f.bind).toMatchObject({ path: join(root, 'data.csv'), mode: 'ro', kind: 'file' });
    expect(d.bind).toMatchObject({ path: join(root, 'out'), mode: 'rw', kind: 'directory' });
    expect(readlinkSync(`/proc/self/fd/${f.bind.fd}`)).toBe(join(root, 'data.csv'));
  });

  it('refuses relative paths and . or .. segments', async () => {
    const root = await tempDir();
    expect(denied(checkBind({ path: 'data.csv' }, { roots: [root] }))).toContain('must be absolute');
    expect(denied(checkBind({ path: `${root}/../etc/passwd` }, { roots: [root] }))).toContain('".." segments are not allowed');
    expect(denied(checkBind({ path: `${root}/./x` }, { roots: [root] }))).toContain('segments are not allowed');
  });

  it('refuses paths outside every root, and everything when there are no roots', async () => {
    const root = await tempDir();
    expect(denied(checkBind({ path: '/etc/hostname' }, { roots: [root] }))).toContain('outside the allowed roots');
    expect(denied(checkBind({ path: '/etc/hostname' }, { roots: [] }))).toContain('no bind roots are configured');
  });

  it('refuses a path that goes through a symbolic link, even one pointing inside the root', async () => {
    const root = await tempDir();
    symlinkSync('/etc', join(root, 'escape'));
    mkdirSync(join(root, 'real'));
    symlinkSync(join(root, 'real'), join(root, 'alias'));
    expect(denied(checkBind({ path: join(root, 'escape/passwd') }, { roots: [root] }))).toContain('goes through a symbolic link');
    expect(denied(checkBind({ path: join(root, 'alias') }, { roots: [root] }))).toContain(`resolves to ${join(root, 'real')}`);
  });

  it('refuses denied paths and any directory that contains one', async () => {
    const home = await tempDir();
    mkdirSync(join(home, '.ssh'));
    writeFileSync(join(home, '.ssh/id_ed25519'), 'secret');
    const rules = { roots: [home], deny: [join(home, '.ssh')] };
    expect(denied(checkBind({ path: join(home, '.ssh/id_ed25519') }, rules))).toContain('is never bound');
    expect(denied(checkBind({ path: home }, rules))).toContain(`it contains ${join(home, '.ssh')}`);
  });

  it('refuses FIFOs, sockets and devices', async () => {
    const root = await tempDir();
    execFileSync('mkfifo', [join(root, 'fifo')]);
    const server = createServer();
    await new Promise<void>((r) => server.listen(join(root, 'sock'), r));
    onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
    expect(denied(checkBind({ path: join(root, 'fifo') }, { roots: [root] }))).toContain('a FIFO');
    expect(denied(checkBind({ path: join(root, 'sock') }, { roots: [root] }))).toContain('a socket');
    expect(denied(checkBind({ path: '/dev/null' }, { roots: ['/dev'], deny: [] }))).toContain('a device or special file');
  });

  it('creates a missing rw file inside a root, and only there', async () => {
    const root = await tempDir();
    const r = checkBind({ path: join(root, 'result.json'), mode: 'rw', create: true }, { roots: [root] });
    if (!r.ok) throw new Error(r.message);
    closeBinds([r.bind]);
    expect(r.bind.kind).toBe('file');
    const other = await tempDir();
    expect(denied(checkBind({ path: join(other, 'x.json'), mode: 'rw', create: true }, { roots: [root] }))).toContain(
      'outside the allowed roots',
    );
    expect(denied(checkBind({ path: join(root, 'missing.txt') }, { roots: [root] }))).toContain('does not exist');
  });

  it.runIf(!isRoot)(
    'as an ordinary user, a denied path this user cannot reach (/root/.ssh) is compared by name, never an error',
    async () => {
      const root = await tempDir();
      writeFileSync(join(root, 'data.csv'), 'a,b\n');
      const r = checkBind({ path: join(root, 'data.csv') }, { roots: [root], deny: ['/root/.ssh', '/root/.gnupg'] });
      if (!r.ok) throw new Error(r.message);
      closeBinds([r.bind]);
    },
  );

  it('never creates a file where the deny list forbids binding, even inside a root', async () => {
    const root = await tempDir();
    mkdirSync(join(root, '.forge'));
    const state = join(root, '.forge');
    for (const name of ['policy.rules', 'policy.json']) {
      const msg = denied(checkBind({ path: join(state, name), mode: 'rw', create: true }, { roots: [root], deny: [state] }));
      expect(msg).toContain('is never bound');
      expect(existsSync(join(state, name))).toBe(false);
    }
  });
});

describe('checkBind against a racing swap of a parent directory', () => {
  it('never creates or opens anything outside the walked directories while a parent is exchanged with a symlink (RENAME_EXCHANGE)', async () => {
    const root = await tempDir();
    const secret = await tempDir(); // stands for FORGE_HOME: outside the roots
    writeFileSync(join(secret, 'vault.json'), '{}');
    mkdirSync(join(root, 'dir'));
    writeFileSync(join(root, 'dir', 'vault.json'), 'decoy');
    symlinkSync(secret, join(root, 'link'));
    // A racer exchanging root/dir and root/link as fast as it can, for a bounded time.
    const racer = spawn(
      'python3',
      [
        '-c',
        `import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
a, b = ${JSON.stringify(join(root, 'dir'))}.encode(), ${JSON.stringify(join(root, 'link'))}.encode()
end = time.time() + 4
while time.time() < end:
    if libc.renameat2(-100, a, -100, b, 2) != 0:
        raise SystemExit('renameat2: errno %d' % ctypes.get_errno())`,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let racerErr = '';
    racer.stderr.on('data', (c: Buffer) => (racerErr += c.toString()));
    const exited = new Promise<number | null>((r) => racer.on('exit', r));
    onTestFinished(() => void racer.kill('SIGKILL'));
    let created = 0;
    let opened = 0;
    let refused = 0;
    const deadline = Date.now() + 3000;
    for (let i = 0; Date.now() < deadline; i++) {
      const made = checkBind({ path: join(root, 'dir', `new-${i}.txt`), mode: 'rw', create: true }, { roots: [root], deny: [] });
      const read = checkBind({ path: join(root, 'dir', 'vault.json'), mode: 'rw' }, { roots: [root], deny: [] });
      for (const r of [made, read]) {
        if (r.ok) {
          // The descriptor must be inside the root, never in the directory the symlink points at.
          expect(readlinkSync(`/proc/self/fd/${r.bind.fd}`).startsWith(`${root}/`)).toBe(true);
          closeBinds([r.bind]);
          r === made ? created++ : opened++;
        } else refused++;
      }
      if (i % 50 === 0) await new Promise((r) => setImmediate(r));
    }
    expect(await exited, racerErr).toBe(0);
    expect(readdirSync(secret)).toEqual(['vault.json']); // nothing was created there
    expect(created + opened + refused).toBeGreaterThan(100);
    expect(created).toBeGreaterThan(0); // the race did not just refuse everything
  });
});

describe('checkBind and the files a host program runs code from', () => {
  it('refuses .git, .envrc, editor, shell and agent settings, ro and rw, unless the exact path is allowed', async () => {
    const root = await tempDir();
    mkdirSync(join(root, '.git', 'hooks'), { recursive: true });
    writeFileSync(join(root, '.git', 'config'), '[core]\n');
    mkdirSync(join(root, '.vscode'));
    writeFileSync(join(root, '.vscode', 'settings.json'), '{}');
    for (const name of ['.envrc', '.bashrc', '.zshrc', '.profile', '.mcp.json', '.gitconfig']) writeFileSync(join(root, name), '');
    mkdirSync(join(root, '.claude'));
    const rules = { roots: [root], deny: [] };
    for (const p of [
      '.git/config',
      '.git/hooks',
      '.git',
      '.vscode/settings.json',
      '.envrc',
      '.bashrc',
      '.zshrc',
      '.profile',
      '.mcp.json',
      '.gitconfig',
      '.claude',
    ]) {
      for (const mode of ['ro', 'rw'] as const) {
        expect(denied(checkBind({ path: join(root, p), mode }, rules)), `${p} ${mode}`).toContain(
          'where a program on the host finds code to run',
        );
      }
    }
    // Creating one is refused too, and creates nothing.
    expect(denied(checkBind({ path: join(root, '.git', 'hooks', 'pre-commit'), mode: 'rw', create: true }, rules))).toContain('.git');
    expect(existsSync(join(root, '.git', 'hooks', 'pre-commit'))).toBe(false);
    // A rw bind of the directory that holds them directly is refused; ro is fine, and so is a narrower rw one.
    expect(denied(checkBind({ path: root, mode: 'rw' }, rules))).toContain('it holds .');
    mkdirSync(join(root, 'out'));
    for (const r of [checkBind({ path: root, mode: 'ro' }, rules), checkBind({ path: join(root, 'out'), mode: 'rw' }, rules)]) {
      if (!r.ok) throw new Error(r.message);
      closeBinds([r.bind]);
    }
    // An operator's explicit allow re-opens exactly that path.
    const allowed = checkBind({ path: join(root, '.git', 'config'), mode: 'rw' }, { ...rules, allow: [join(root, '.git', 'config')] });
    if (!allowed.ok) throw new Error(allowed.message);
    closeBinds([allowed.bind]);
    expect(
      denied(checkBind({ path: join(root, '.git', 'HEAD'), mode: 'ro' }, { ...rules, allow: [join(root, '.git', 'config')] })),
    ).toContain('.git');
  });

  it('refuses a rw bind of a file with other hard links', async () => {
    const root = await tempDir();
    writeFileSync(join(root, 'a'), 'x');
    linkSync(join(root, 'a'), join(root, 'b'));
    expect(denied(checkBind({ path: join(root, 'a'), mode: 'rw' }, { roots: [root], deny: [] }))).toContain('2 hard links');
    const ro = checkBind({ path: join(root, 'a'), mode: 'ro' }, { roots: [root], deny: [] });
    if (!ro.ok) throw new Error(ro.message);
    closeBinds([ro.bind]);
  });
});
