import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it, onTestFinished } from 'vitest';

/**
 * Every published package is an ES module only (one copy of each module: no dual-package hazard),
 * and a CommonJS project uses it as the READMEs say: `require()` on Node ≥ 20.19 (the packages'
 * `engines`), and TypeScript with `"module": "node20"` or `"nodenext"`. Older TypeScript module
 * settings refuse the import (TS1479), which is what attw's default profile reports; its
 * esm-only profile passes (each package's `lint`).
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');

interface Manifest {
  name: string;
  private?: boolean;
  exports?: Record<string, unknown>;
}

const packages = readdirSync(join(ROOT, 'packages'))
  .map((d) => join(ROOT, 'packages', d))
  .filter((d) => existsSync(join(d, 'package.json')))
  .map((dir) => ({ dir, manifest: JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest }))
  .filter((p) => !p.manifest.private);

/** The built entry of a package (what its `exports["."]` names for `default`). */
function entry(dir: string): string {
  return join(dir, 'dist', 'index.js');
}

describe('a CommonJS project', () => {
  it('there are published packages, built', () => {
    expect(packages.length).toBeGreaterThan(3);
    const unbuilt = packages.filter((p) => !existsSync(entry(p.dir))).map((p) => p.manifest.name);
    expect(unbuilt, 'build the workspace first: pnpm turbo run build').toEqual([]);
  });

  for (const { dir, manifest } of packages) {
    it(`require('${manifest.name}') gives what import gives, with no warning`, async () => {
      // The package's own directory: `require` of its name resolves through its exports (self-reference).
      const r = spawnSync(
        process.execPath,
        ['-e', `process.stdout.write(JSON.stringify(Object.keys(require(${JSON.stringify(manifest.name)})).sort()))`],
        {
          cwd: dir,
          encoding: 'utf8',
        },
      );
      expect(r.status, r.stderr).toBe(0);
      expect(r.stderr).toBe('');
      const esm = Object.keys(await import(pathToFileURL(entry(dir)).href)).sort();
      expect(JSON.parse(r.stdout)).toEqual(esm);
    });
  }

  it("each published package's README says what a CommonJS project does", () => {
    const silent = packages
      .filter((p) => {
        const readme = readFileSync(join(p.dir, 'README.md'), 'utf8');
        return !(readme.includes('## CommonJS') && readme.includes(`require('${p.manifest.name}')`));
      })
      .map((p) => p.manifest.name);
    expect(silent).toEqual([]);
  });

  it('TypeScript compiles a CommonJS file importing every package with "module": "node20" and "nodenext", and says to use import() under "node16"', () => {
    const dir = mkdtempSync(join(tmpdir(), 'forge-cjs-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    mkdirSync(join(dir, 'node_modules', '@forge'), { recursive: true });
    for (const p of packages) symlinkSync(p.dir, join(dir, 'node_modules', p.manifest.name));
    symlinkSync(join(ROOT, 'node_modules', '@types'), join(dir, 'node_modules', '@types'));
    writeFileSync(join(dir, 'package.json'), '{"type": "commonjs"}\n');
    const lines = packages.map((p, i) => `import * as p${i} from '${p.manifest.name}';`);
    lines.push(`export const counts = [${packages.map((_, i) => `Object.keys(p${i}).length`).join(', ')}];`);
    writeFileSync(join(dir, 'use.cts'), `${lines.join('\n')}\n`);
    const tsc = (module: string) =>
      spawnSync(
        process.execPath,
        [TSC, '--noEmit', '--strict', '--skipLibCheck', '--module', module, '--types', 'node', join(dir, 'use.cts')],
        {
          cwd: dir,
          encoding: 'utf8',
        },
      );
    for (const module of ['node20', 'nodenext']) {
      const r = tsc(module);
      expect(r.status, `--module ${module}: ${r.stdout}${r.stderr}`).toBe(0);
    }
    const old = tsc('node16');
    expect(old.status).not.toBe(0);
    expect(old.stdout).toMatch(/TS1479: .*ECMAScript module and cannot be imported with 'require'/);
  });
});
