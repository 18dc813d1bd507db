// A second process of the cache store and run store conformance suites (src/cache.ts, src/runs.ts).
//
//   node store-child.mjs '<json>'
//
// The JSON: { open: {module, export, args}, go?, op, ... }. The store is opened with
// `await (await import(module))[export](...args)`. With `go`, the child first creates
// `<go>.ready.<pid>`, then waits for the file `go` (a start barrier, so racing children really
// race). Each op prints JSON lines; the last line is {"done": true} and the child exits 0 (any
// failure goes to stderr, exit code 1). Ops:
//   cacheSetMany {keys, pad}         sets each key (envelope data {key, pad}), prints {"set": key} after each
//   cacheSetForever {keys, pad}      like cacheSetMany over keys again and again, never done (killed by the parent)
//   runWriteMany {ids, pad}          writes the manifest {run_id, n, pad} of each id, then its hit
//                                    record {run_id: hitId, seed_run, persona}; prints {"run": id} after each
//   runRewriteForever {id, pad}      rewrites id's manifest with n = 1, 2, 3, … forever, printing {"n": n} after each
import { existsSync, writeFileSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';

const args = JSON.parse(process.argv[2] ?? '{}');
const specifier = isAbsolute(args.open.module) ? pathToFileURL(args.open.module).href : args.open.module;
const openFn = (await import(specifier))[args.open.export];
if (typeof openFn !== 'function') throw new Error(`${args.open.module} has no function export "${args.open.export}"`);
const store = await openFn(...(args.open.args ?? []));

if (args.go) {
  writeFileSync(`${args.go}.ready.${process.pid}`, '');
  while (!existsSync(args.go)) await sleep(1);
}

const say = (v) => process.stdout.write(`${JSON.stringify(v)}\n`);
const envelope = (key) => ({ ok: true, data: { key, pad: 'x'.repeat(args.pad ?? 0) }, meta: { run_id: 'seed', cache: 'miss' } });

switch (args.op) {
  case 'cacheSetMany':
    for (const key of args.keys) {
      await store.set(key, envelope(key), `seed-${key.slice(0, 8)}`);
      say({ set: key });
    }
    break;
  case 'cacheSetForever':
    for (;;) {
      for (const key of args.keys) {
        await store.set(key, envelope(key), `seed-${key.slice(0, 8)}`);
        say({ set: key });
      }
    }
  case 'runWriteMany':
    for (const [i, id] of args.ids.entries()) {
      await store.writeManifest(id, { run_id: id, n: i, persona: 'p', pad: 'y'.repeat(args.pad ?? 0) });
      await store.appendHit({ run_id: args.hitIds[i], seed_run: id, persona: 'p', cache: 'hit' });
      say({ run: id });
    }
    break;
  case 'runRewriteForever':
    for (let n = 1; ; n++) {
      await store.writeManifest(args.id, { run_id: args.id, n, persona: 'p', pad: 'z'.repeat(args.pad ?? 0) });
      say({ n });
    }
  default:
    throw new Error(`unknown op ${args.op}`);
}
say({ done: true });
if (typeof store.close === 'function') await store.close();
process.exit(0);
