#!/usr/bin/env node
// prepublishOnly guard: the packages are named @forge/*, but on the public npm registry the
// @forge scope belongs to an unrelated project. Refuse to publish under that scope to the public
// registry; a publisher first renames the packages to a scope they own (see README "Publishing").
import { readFileSync } from 'node:fs';

const pkg = JSON.parse(readFileSync('package.json', 'utf8'));
const registry = (process.env.npm_config_registry || 'https://registry.npmjs.org/').replace(/\/+$/, '');
const publicRegistry = /^https?:\/\/registry\.(npmjs\.org|yarnpkg\.com)$/.test(registry);

if (pkg.name.startsWith('@forge/') && publicRegistry) {
  console.error(
    `refusing to publish ${pkg.name} to ${registry}: the @forge scope on the public registry belongs to another project.\n` +
      'Rename the packages to a scope you own first (README.md, "Publishing"), or publish to a private registry (--registry).',
  );
  process.exit(1);
}
