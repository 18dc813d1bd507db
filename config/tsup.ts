import { defineConfig, type Options } from 'tsup';

/** How every package is built: ESM for Node 20, with declarations and source maps. */
export function packageBuild(overrides: Options = {}) {
  return defineConfig({
    entry: ['src/index.ts'],
    format: ['esm'],
    target: 'node20',
    platform: 'node',
    dts: true,
    clean: true,
    sourcemap: true,
    ...overrides,
  });
}
