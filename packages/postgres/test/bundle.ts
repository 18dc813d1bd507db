import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** A bundle built by {@link bundleForNode}: its one ESM file, and how to remove it with its temp dir. */
export interface NodeBundle {
  module: string;
  remove(): void;
}

/** What to bundle: a TypeScript file, or TypeScript source text whose imports resolve from this package's directory. */
export type BundleSource = { entry: string } | { contents: string };

const PACKAGE_DIR = fileURLToPath(new URL('..', import.meta.url));

/**
 * Bundles `source` with esbuild (the one tsup installs) into `child.mjs` in a fresh
 * `<prefix>` temp dir (e.g. `forge-pgqueue-`), for child processes: plain node cannot import
 * TypeScript. ESM for Node 20, `pg-native` left out; pg is CommonJS, so its require() calls of
 * node builtins are given a real require. The temp dir is removed when the build fails.
 */
export async function bundleForNode(prefix: string, source: BundleSource): Promise<NodeBundle> {
  const require = createRequire(realpathSync(join(PACKAGE_DIR, '../../node_modules/tsup/package.json')));
  const esbuild = require('esbuild') as { build(options: Record<string, unknown>): Promise<unknown> };
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const module = join(dir, 'child.mjs');
  const remove = () => rmSync(dir, { recursive: true, force: true });
  try {
    await esbuild.build({
      ...('entry' in source
        ? { entryPoints: [source.entry] }
        : { stdin: { contents: source.contents, resolveDir: PACKAGE_DIR, loader: 'ts' } }),
      outfile: module,
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      external: ['pg-native'],
      logLevel: 'error',
      banner: { js: "import { createRequire as __forgeRequire } from 'node:module'; const require = __forgeRequire(import.meta.url);" },
    });
  } catch (err) {
    remove();
    throw err;
  }
  return { module, remove };
}
