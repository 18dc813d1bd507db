import { packageBuild } from '../../config/tsup.js';

// `./inert` is an entry of its own: the text guards alone, for a program that prints before (or
// without) loading the registry, its schema compiler and its store.
export default packageBuild({
  entry: ['src/index.ts', 'src/inert.ts'],
  dts: { entry: ['src/index.ts', 'src/inert.ts'] },
  splitting: true,
});
