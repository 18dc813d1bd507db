import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * What a TypeScript user of a published package needs comes with it: every package a published
 * package's built declarations (`dist/**\/*.d.ts`) import is one of its dependencies (or peer
 * dependencies), and where that package ships no types of its own, so is its `@types/` package.
 * Node's built-in modules are the user's `@types/node`, as for any library for Node.
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const BUILTIN = new Set(builtinModules);

interface Manifest {
  name: string;
  private?: boolean;
  types?: string;
  typings?: string;
  exports?: unknown;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

function declarations(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.d.ts') || f.endsWith('.d.mts') || f.endsWith('.d.cts'))
    .map((f) => join(dir, f));
}

/** The package a bare specifier names (`pg`, `@forge/runner` of `@forge/runner/x`), or undefined for a relative or built-in one. */
function packageOf(spec: string): string | undefined {
  if (spec.startsWith('.') || spec.startsWith('/') || spec.startsWith('node:') || BUILTIN.has(spec.split('/')[0] as string))
    return undefined;
  const parts = spec.split('/');
  return spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

/** Whether `name`, installed for the package in `dir` (as pnpm links it), ships declarations of its own. */
function shipsTypes(name: string, dir: string): boolean {
  const at = [join(dir, 'node_modules', name), join(ROOT, 'node_modules', name)].find((d) => existsSync(join(d, 'package.json')));
  if (!at) return false;
  const m = JSON.parse(readFileSync(join(at, 'package.json'), 'utf8')) as Manifest;
  if (m.types || m.typings || JSON.stringify(m.exports ?? {}).includes('"types"')) return true;
  return existsSync(join(at, 'index.d.ts'));
}

const packages = readdirSync(join(ROOT, 'packages'))
  .map((d) => join(ROOT, 'packages', d))
  .filter((d) => existsSync(join(d, 'package.json')))
  .map((dir) => ({ dir, manifest: JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest }))
  .filter((p) => !p.manifest.private);

describe('published declarations', () => {
  it('there are published packages with built declarations to check', () => {
    expect(packages.filter((p) => declarations(join(p.dir, 'dist')).length > 0).length).toBeGreaterThan(3);
  });

  it.each(packages.map((p) => [p.manifest.name, p] as const))('%s: every package its types import comes with it', (_name, p) => {
    const shipped = { ...p.manifest.dependencies, ...p.manifest.peerDependencies };
    const missing = new Set<string>();
    for (const file of declarations(join(p.dir, 'dist'))) {
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)['"]([^'"]+)['"]/gm)) {
        const name = packageOf(m[1] as string);
        if (name === undefined || name === p.manifest.name) continue;
        if (!(name in shipped)) missing.add(`${name} (imported by ${file.slice(p.dir.length + 1)}; add it to dependencies)`);
        else if (!shipsTypes(name, p.dir) && !(`@types/${name.replace(/^@/, '').replace('/', '__')}` in shipped))
          missing.add(`@types/${name} (${name} ships no types; add @types/${name} to dependencies)`);
      }
    }
    expect([...missing]).toEqual([]);
  });
});
