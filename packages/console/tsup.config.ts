import { defineConfig } from 'tsup';
import { packageBuild } from '../../config/tsup.js';

// Two builds: the server (Node, with declarations) and the page (one browser bundle and its
// stylesheet in dist/web, every byte served by the console itself: no asset from elsewhere).
export default [
  // The page's build cleans dist/web; this one must not clean dist under it.
  packageBuild({ entry: ['src/index.ts', 'src/calls.ts'], clean: false }),
  defineConfig({
    entry: { app: 'src/web/main.tsx' },
    outDir: 'dist/web',
    format: ['iife'],
    platform: 'browser',
    target: 'chrome120',
    minify: true,
    sourcemap: false,
    dts: false,
    clean: true,
    outExtension: () => ({ js: '.js' }),
    noExternal: [/.*/],
    esbuildOptions(o) {
      o.jsx = 'automatic';
      o.jsxImportSource = 'preact';
      o.entryNames = '[name]';
    },
    publicDir: 'src/web/public',
  }),
];
