import { build } from 'tsup';
import { packageBuild } from '../../config/tsup.js';

// `./inert` is an entry of its own: the text guards alone, for a program that prints before (or
// without) loading the registry, its schema compiler and its store.
// Then, once the package is built, ajv and ajv-formats as one CommonJS file (dist/ajv.cjs), which
// ajv-lazy.ts requires at the first schema compile: one file instead of some seventy. Built after
// the package (onSuccess), so the package's clean of dist/ cannot remove it.
export default packageBuild({
  entry: ['src/index.ts', 'src/inert.ts'],
  dts: { entry: ['src/index.ts', 'src/inert.ts'] },
  splitting: true,
  async onSuccess() {
    await build({
      config: false,
      entry: { ajv: 'src/ajv-bundle.ts' },
      format: ['cjs'],
      platform: 'node',
      target: 'node20',
      outDir: 'dist',
      outExtension: () => ({ js: '.cjs' }),
      clean: false,
      dts: false,
      sourcemap: false,
      noExternal: ['ajv', 'ajv-formats'],
      silent: true,
    });
  },
});
