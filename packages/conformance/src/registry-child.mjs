// A second process of the tool store conformance suite (src/registry.ts).
//
//   node registry-child.mjs '<json>'
//
// The JSON: { open: {module, export, args}, scope, builtins?, go?, op, ... }. The store is opened
// with `(await import(module))[export](...args, scope, builtins)`. With `go`, the child first
// creates `<go>.ready.<pid>`, then waits for the file `go` (a start barrier, so racing children
// really race). Prints the operation's result as one JSON line and exits 0; any failure goes to
// stderr with exit code 1. Ops:
//   create   {name, tool}        put: writes `tool` (version: nextVersion) when the name is missing;
//                                prints {won, current} (current: the tool it found, when it lost)
//   overwrite {name, tool, times} put `times` times, each writing `tool` with nextVersion; prints the versions
//   createMany {tools}           create for each tool in turn; prints the versions written
//   remove   {name}              prints the status remove returned
//   crash    {name, tool, at}    put writing `tool`, then SIGKILLs itself: at "locked" inside decide
//                                (the lock held, nothing written), at a number n after n turns of the
//                                event loop once decide has returned (somewhere in the write, or after)
import { existsSync, writeFileSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';

const args = JSON.parse(process.argv[2] ?? '{}');
const specifier = isAbsolute(args.open.module) ? pathToFileURL(args.open.module).href : args.open.module;
const openFn = (await import(specifier))[args.open.export];
if (typeof openFn !== 'function') throw new Error(`${args.open.module} has no function export "${args.open.export}"`);
const store = await openFn(...(args.open.args ?? []), args.scope, args.builtins ?? []);

if (args.go) {
  writeFileSync(`${args.go}.ready.${process.pid}`, '');
  while (!existsSync(args.go)) await sleep(1);
}

const die = () => process.kill(process.pid, 'SIGKILL');

async function create(name, tool) {
  return store.put(name, (current, next) => {
    if (current.status !== 'missing') return { value: { won: false, current: current.status === 'ok' ? current.tool : current } };
    return { write: { ...tool, version: next }, value: { won: true, version: next } };
  });
}

let result;
switch (args.op) {
  case 'create':
    result = await create(args.name, args.tool);
    break;
  case 'createMany':
    result = [];
    for (const tool of args.tools) result.push(await create(tool.name, tool));
    break;
  case 'overwrite':
    result = [];
    for (let i = 0; i < args.times; i++) {
      result.push(await store.put(args.name, (_current, next) => ({ write: { ...args.tool, version: next }, value: next })));
    }
    break;
  case 'remove':
    result = (await store.remove(args.name)).status;
    break;
  case 'crash': {
    await store.put(args.name, (_current, next) => {
      if (args.at === 'locked') die();
      let turns = args.at;
      const tick = () => (turns-- <= 0 ? die() : setImmediate(tick));
      setImmediate(tick);
      return { write: { ...args.tool, version: next }, value: next };
    });
    // The write finished before the chosen turn: die anyway, as a crash after the write.
    die();
    break;
  }
  default:
    throw new Error(`unknown op ${args.op}`);
}
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exit(0);
