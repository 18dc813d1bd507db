// Invariant 2, one path, one spelling (docs/security.md): a bind path is put in its one canonical
// spelling before any check, the checks see only that spelling, and what the kernel resolves is
// what was checked. forge's own state, FORGE_HOME and the vault stay unbindable in every spelling.
import { execFileSync } from 'node:child_process';
import { existsSync, linkSync, mkdirSync, readFileSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { canonicalBindPath, checkBind, closeBinds } from '@forge/sandbox';
import fc from 'fast-check';
import { describe, expect, it, onTestFinished } from 'vitest';
import { asRoot, cli, py, refused, scratch, scratchDir, target } from './helpers.js';

/** A tool that appends a line to the file or directory entry it is given, rw-bound. */
const writer = py(
  'writer',
  [
    'p = args["path"]',
    'if os.path.isdir(p): p = os.path.join(p, "policy.json")',
    'open(p, "a").write("{\\"bind_roots\\": [\\"/\\"]}\\n")',
    'print(json.dumps({"ok": True, "data": "written"}))',
  ].join('\n'),
  { input_schema: { type: 'object', properties: { path: { type: 'string', 'x-bind': 'rw' } }, required: ['path'] } },
);

/** A tool that reads the file it is given, ro-bound. */
const reader = py('reader', 'print(json.dumps({"ok": True, "data": open(args["path"]).read()}))', {
  input_schema: { type: 'object', properties: { path: { type: 'string', 'x-bind': 'ro' } }, required: ['path'] },
});

/** Spellings of `dir/rest` that name the same place to the kernel. */
function spellings(dir: string, rest = ''): string[] {
  const tail = rest ? `/${rest}` : '';
  const dbl = rest ? `//${rest.split('/').join('//')}` : '';
  const parts = dir.split('/').filter(Boolean);
  return [
    `${dir}${tail}`,
    `${dir}${tail}/`,
    `${dir}${dbl}`,
    `${dir}${dbl}//`,
    `/${dir}${tail}`,
    `/${parts.join('//')}${tail}`,
    `${dir.replace(/\/([^/]+)$/, '//$1')}${tail}`,
    `${dir.replace(/\/([^/]+)$/, '///$1///')}${rest}`,
  ];
}

describe('invariant 2: one path, one spelling', () => {
  it('break 1: <project>//.forge and every other spelling of forge state is refused, and nothing is written there', async () => {
    const t = await target();
    expect((await t.forge.forgeTool(writer)).ok).toBe(true);
    const state = join(t.project, '.forge');
    const tries = [
      ...spellings(t.project, '.forge'),
      ...spellings(t.project, '.forge/policy.json'),
      `${t.project}//.forge//tools`,
      `${t.project}/./.forge`,
      `${t.project}/x/../.forge`,
      // The project itself holds .forge: a rw bind of it in any spelling would hand it over too.
      ...spellings(t.project),
    ];
    for (const path of tries) {
      const err = refused(await t.forge.callTool('writer', { path }), 'bind_denied');
      expect(err.message, path).toMatch(/never bound|not allowed|contains/);
    }
    expect(existsSync(join(state, 'policy.json'))).toBe(false);
  });

  it('FORGE_HOME and the vault are refused in every spelling when the bind roots cover them', async () => {
    const t = await target({ userPolicy: {} });
    const root = realpathSync(t.root);
    const wide = await target({ userPolicy: { bind_roots: [root] } });
    void t;
    writeFileSync(join(wide.home, 'secrets.json'), '{"API_KEY":"s3cret"}', { mode: 0o600 });
    expect((await wide.forge.forgeTool(reader)).ok).toBe(true);
    expect((await wide.forge.forgeTool(writer)).ok).toBe(true);
    for (const path of [...spellings(wide.home, 'secrets.json'), ...spellings(wide.home, 'policy.json')]) {
      refused(await wide.forge.callTool('reader', { path }), 'bind_denied');
    }
    for (const path of [...spellings(wide.home), ...spellings(wide.root)]) {
      refused(await wide.forge.callTool('writer', { path }), 'bind_denied');
    }
  });

  it('a hard link to the vault elsewhere in the project is refused by identity, not by name', async () => {
    const t = await target();
    const vault = join(t.home, 'secrets.json');
    writeFileSync(vault, '{"API_KEY":"s3cret"}', { mode: 0o600 });
    const alias = join(t.project, 'notes.json');
    try {
      linkSync(vault, alias);
    } catch (err) {
      // fs.protected_hardlinks may refuse a link to a file of another user; as its owner it never does.
      throw new Error(`could not hard-link the vault into the project: ${(err as Error).message}`);
    }
    expect((await t.forge.forgeTool(reader)).ok).toBe(true);
    const err = refused(await t.forge.callTool('reader', { path: alias }), 'bind_denied');
    expect(err.message).toContain('is never bound');
    expect(JSON.stringify(err)).not.toContain('s3cret');
  });

  asRoot('forge state bind-mounted at another name in the project is refused by identity', async () => {
    const t = await target();
    expect((await t.forge.forgeTool(writer)).ok).toBe(true);
    const alias = join(t.project, 'alias');
    mkdirSync(alias);
    execFileSync('mount', ['--bind', join(t.project, '.forge'), alias]);
    onTestFinished(() => void execFileSync('umount', ['-l', alias]));
    for (const path of [alias, `${alias}/`, `${t.project}//alias`]) {
      const err = refused(await t.forge.callTool('writer', { path }), 'bind_denied');
      expect(err.message).toContain('is never bound');
    }
    expect(existsSync(join(t.project, '.forge', 'policy.json'))).toBe(false);
  });

  it('forge tools export refuses forge’s own state in every spelling and through a link, creating nothing there', async () => {
    const t = scratch();
    const linked = join(t.root, 'to-home');
    symlinkSync(t.home, linked);
    const tries = [
      ...spellings(t.home, 'tools'),
      `${t.home}/./tools`,
      `${t.project}/.forge/../.forge/tools`,
      join(t.project, '.forge'),
      join(linked, 'tools'),
      linked,
    ];
    for (const dir of tries) {
      const r = await cli(t, ['tools', 'export', dir]);
      expect(r.code, dir).toBe(2);
      expect(r.stderr, dir).toMatch(/forge's own state/);
    }
    expect(existsSync(join(t.home, 'tools'))).toBe(false);
    expect(existsSync(join(t.project, '.forge', 'tools'))).toBe(false);
  });

  it('a planted export manifest cannot make an export remove what it did not make', async () => {
    const t = scratch();
    const dir = join(t.root, 'tools');
    mkdirSync(join(dir, 'notes.d'), { recursive: true });
    writeFileSync(join(dir, 'notes'), 'my notes\n');
    writeFileSync(join(dir, 'notes.d', 'schema'), 'mine\n');
    // Made by someone else's export, or edited: it claims "notes" and "fib" as the export's.
    writeFileSync(
      join(dir, '.forge-tools.json'),
      JSON.stringify({ forge_tool_dir: 1, home: t.home, project: t.project, persona: 'x', tools: ['fib', 'notes'] }),
    );
    writeFileSync(join(dir, 'fib'), '#!/bin/sh\n# forge tool notes: not this one\n');
    const r = await cli(t, ['tools', 'export', dir]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/notes left out: .*not an export's launcher of notes/);
    expect(readFileSync(join(dir, 'notes'), 'utf8')).toBe('my notes\n');
    expect(readFileSync(join(dir, 'notes.d', 'schema'), 'utf8')).toBe('mine\n');
    expect(readFileSync(join(dir, 'fib'), 'utf8')).toContain('not this one');
    expect(JSON.parse(readFileSync(join(dir, '.forge-tools.json'), 'utf8')).tools).toEqual([]);
    // A relative FORGE_TOOL_PATH entry would run whatever the working directory holds: refused.
    const run = await cli(t, ['run', 'notes'], { env: { FORGE_TOOL_PATH: `tools:${dir}` } });
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/entry "tools" is not an absolute directory/);
  });

  it('property: the canonical spelling is the kernel’s own resolution of any slash-spelling of a real path', () => {
    const base = realpathSync(scratchDir());
    const names = ['a', 'b', 'c.d', '.forge', 'e f'];
    for (const x of names) for (const y of names) mkdirSync(join(base, x, y), { recursive: true });
    const seg = fc.constantFrom(...names);
    const slashes = fc.integer({ min: 1, max: 3 }).map((n) => '/'.repeat(n));
    fc.assert(
      fc.property(fc.tuple(seg, seg), fc.array(slashes, { minLength: 3, maxLength: 3 }), fc.boolean(), ([x, y], sl, trailing) => {
        const spelled = `${base}${sl[0]}${x}${sl[1]}${y}${trailing ? sl[2] : ''}`;
        const c = canonicalBindPath(spelled);
        expect(c.ok).toBe(true);
        if (c.ok) expect(c.path).toBe(realpathSync(spelled));
      }),
      { numRuns: 300 },
    );
  });

  it('property: no spelling of a path in or above a denied directory passes checkBind', () => {
    const base = realpathSync(scratchDir());
    const state = join(base, 'p', '.forge');
    mkdirSync(join(state, 'tools'), { recursive: true });
    writeFileSync(join(state, 'policy.json'), '{}');
    const seg = fc.constantFrom('p', '.forge', 'tools', 'policy.json');
    const piece = fc.tuple(fc.integer({ min: 1, max: 3 }), seg).map(([n, s]) => `${'/'.repeat(n)}${s}`);
    fc.assert(
      fc.property(
        fc.array(piece, { minLength: 1, maxLength: 4 }),
        fc.boolean(),
        fc.constantFrom('ro', 'rw') as fc.Arbitrary<'ro' | 'rw'>,
        (pieces, trailing, mode) => {
          const spelled = `${base}${pieces.join('')}${trailing ? '/' : ''}`;
          const r = checkBind({ path: spelled, mode }, { roots: [base], deny: [state] });
          if (r.ok) {
            closeBinds([r.bind]);
            // Only paths that neither lie in .forge nor contain it may pass, and only if the kernel agrees.
            const real = realpathSync(spelled);
            expect(real.startsWith(`${state}/`) || real === state, spelled).toBe(false);
            expect(state.startsWith(`${real}/`), spelled).toBe(false);
          }
        },
      ),
      { numRuns: 400 },
    );
    expect(readFileSync(join(state, 'policy.json'), 'utf8')).toBe('{}');
  });
});
