import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readlinkSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type BindCheck, checkBind, closeBinds } from '../src/index.js';
import { tempDir } from './helpers.js';

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
