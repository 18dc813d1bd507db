#!/usr/bin/env node
// A throwaway PostgreSQL server for trying forge's database store on one machine, and for the
// benchmarks: `node scripts/with-postgres.mjs <command> [args...]` starts one (initdb in a
// forge-pg- temp directory, a Unix socket only, as the `postgres` user when run as root), runs the
// command with FORGE_STORE set to its connection string, then stops it and removes the directory.
// A real deployment points --store at its own server instead. Needs Debian's `postgresql`
// (bash scripts/setup.sh installs it).
//
// The server is the one the tests start (packages/conformance/src/postgres.ts, TypeScript: its
// types are stripped here), so what the README shows is what the tests run.

import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HARNESS = new URL('../packages/conformance/src/postgres.ts', import.meta.url);

/** `startPostgres` of the test harness, loaded from its TypeScript source. */
export async function loadStartPostgres() {
  const { transformWithOxc } = await import('vite');
  const { code } = await transformWithOxc(await readFile(HARNESS, 'utf8'), 'postgres.ts', { lang: 'ts' });
  // Its one package import, resolved from the package that depends on it.
  const pg = pathToFileURL(createRequire(new URL('../packages/conformance/package.json', import.meta.url)).resolve('pg')).href;
  const js = code.replace(/from ["']pg["']/, `from ${JSON.stringify(pg)}`);
  return (await import(`data:text/javascript;base64,${Buffer.from(js).toString('base64')}`)).startPostgres;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [command, ...args] = process.argv.slice(2);
  if (!command) {
    console.error('usage: node scripts/with-postgres.mjs <command> [args...]   (the command gets FORGE_STORE)');
    process.exit(2);
  }
  const startPostgres = await loadStartPostgres();
  const server = await startPostgres();
  const url = await server.database('forge');
  console.error(`with-postgres: a throwaway server at ${url}`);
  const child = spawn(command, args, { stdio: 'inherit', env: { ...process.env, FORGE_STORE: url } });
  const forward = (s) => child.kill(s);
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  const code = await new Promise((resolve) => child.on('exit', (c, s) => resolve(c ?? (s ? 1 : 0))));
  await server.stop();
  process.exit(code);
}
