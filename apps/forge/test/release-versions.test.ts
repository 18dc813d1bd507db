/**
 * What `changeset version` would release, run for real on a copy of the workspace's manifests and
 * pending changesets: a package never released yet (no CHANGELOG.md) sits at 0.0.0 and its first
 * release comes out 0.1.0; a package that says it was released has the CHANGELOG to show for it.
 */
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it, onTestFinished } from 'vitest';

const execFileP = promisify(execFile);
const ROOT = resolve(import.meta.dirname, '../../..');

interface Manifest {
  name: string;
  version: string;
  private?: boolean;
}

/** The workspace's package directories (`packages/*`, `apps/*`), relative to the root. */
function packageDirs(root: string): string[] {
  return ['packages', 'apps'].flatMap((group) =>
    readdirSync(join(root, group))
      .filter((d) => existsSync(join(root, group, d, 'package.json')))
      .map((d) => `${group}/${d}`),
  );
}

const manifest = (root: string, dir: string) => JSON.parse(readFileSync(join(root, dir, 'package.json'), 'utf8')) as Manifest;

describe('changeset version', () => {
  it('releases each unreleased published package as 0.1.0, and no package claims a release it has no CHANGELOG for', async () => {
    const copy = mkdtempSync(join(tmpdir(), 'forge-release-'));
    onTestFinished(() => rmSync(copy, { recursive: true, force: true }));
    for (const f of ['package.json', 'pnpm-workspace.yaml', '.changeset']) cpSync(join(ROOT, f), join(copy, f), { recursive: true });
    const dirs = packageDirs(ROOT);
    for (const d of dirs) {
      mkdirSync(join(copy, d), { recursive: true });
      cpSync(join(ROOT, d, 'package.json'), join(copy, d, 'package.json'));
      if (existsSync(join(ROOT, d, 'CHANGELOG.md'))) cpSync(join(ROOT, d, 'CHANGELOG.md'), join(copy, d, 'CHANGELOG.md'));
    }
    // The changelog generator named in .changeset/config.json is resolved from the copy.
    symlinkSync(join(ROOT, 'node_modules'), join(copy, 'node_modules'), 'dir');

    const before = new Map(dirs.map((d) => [d, manifest(ROOT, d)]));
    await execFileP(join(ROOT, 'node_modules/.bin/changeset'), ['version'], { cwd: copy, timeout: 60_000 });

    const problems: string[] = [];
    for (const d of dirs) {
      const was = before.get(d) as Manifest;
      if (was.private) continue;
      const released = existsSync(join(ROOT, d, 'CHANGELOG.md'));
      const now = manifest(copy, d).version;
      if (!released && was.version !== '0.0.0')
        problems.push(`${was.name} (${d}) says ${was.version} but was never released (no CHANGELOG.md): set it to 0.0.0`);
      if (!released && now !== '0.1.0') problems.push(`${was.name}'s first release would be ${now}, not 0.1.0 (from ${was.version})`);
    }
    expect(problems).toEqual([]);
  });
});
