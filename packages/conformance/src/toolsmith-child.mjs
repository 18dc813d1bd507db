// A second process of the toolsmith store conformance suites (src/gaps.ts, src/proposals.ts).
//
//   node toolsmith-child.mjs '<json>'
//
// The JSON: { open: {module, export, args}, options?, go?, op, ... }. The store is opened with
// `await (await import(module))[export](...args, options)`. With `go`, the child first creates
// `<go>.ready.<pid>`, then waits for the file `go` (a start barrier, so racing children really
// race). Prints the operation's result as one JSON line and exits 0; any failure goes to stderr
// with exit code 1. Ops:
//   gaps      {tag, n}        records n gap observations in turn (signature `<tag>`, session `<tag>-<i>`,
//                             description `<tag>:<i>:` and 200 × "d"); prints {written: n}
//   gapsSpin  {tag}           as gaps, without end: prints "started" once the first is durable, then
//                             keeps going (many in flight at once) until killed
//   claim     {id, by}        prints what claim returned
//   transition {id, from, to, by}   prints {ok, kind?}
//   appendMany {id, n, tag}   n transitions from any state to `pending`, reason `<tag>-<i>`, each retried on
//                             lock_timeout; prints {done: n}
//   spin      {id, tag}       transitions without end (as appendMany), printing "started" after the first
import { existsSync, writeFileSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';

const args = JSON.parse(process.argv[2] ?? '{}');
const specifier = isAbsolute(args.open.module) ? pathToFileURL(args.open.module).href : args.open.module;
const openFn = (await import(specifier))[args.open.export];
if (typeof openFn !== 'function') throw new Error(`${args.open.module} has no function export "${args.open.export}"`);
const store = await openFn(...(args.open.args ?? []), args.options ?? {});

if (args.go) {
  writeFileSync(`${args.go}.ready.${process.pid}`, '');
  while (!existsSync(args.go)) await sleep(1);
}

const STATES = ['pending', 'validated', 'failed', 'rejected', 'active', 'retired'];

/** The i-th observation of writer `tag`. */
function gap(tag, i) {
  return {
    kind: 'missing_tool',
    signature: tag,
    source: 'forge_request',
    persona: 'conformance',
    session: `${tag}-${i}`,
    description: `${tag}:${i}:${'d'.repeat(200)}`,
  };
}

async function step(id, tag, i) {
  for (;;) {
    try {
      const r = await store.transition(id, STATES, 'pending', { by: 'child', reason: `${tag}-${i}` });
      if (!r.ok) throw new Error(`transition ${i} of ${tag}: ${r.kind}: ${r.message}`);
      return;
    } catch (err) {
      if (err?.code !== 'lock_timeout') throw err;
    }
  }
}

let result;
switch (args.op) {
  case 'gaps':
    for (let i = 0; i < args.n; i++) await store.record(gap(args.tag, i));
    result = { written: args.n };
    break;
  case 'gapsSpin': {
    await store.record(gap(args.tag, 0));
    process.stdout.write('"started"\n');
    for (let i = 1; ; i += 8) {
      await Promise.all(Array.from({ length: 8 }, (_, k) => store.record(gap(args.tag, i + k))));
    }
  }
  case 'claim':
    result = await store.claim(args.id, args.by);
    break;
  case 'transition': {
    const r = await store.transition(args.id, args.from, args.to, { by: args.by });
    result = r.ok ? { ok: true } : { ok: false, kind: r.kind };
    break;
  }
  case 'appendMany':
    for (let i = 0; i < args.n; i++) await step(args.id, args.tag, i);
    result = { done: args.n };
    break;
  case 'spin':
    await step(args.id, args.tag, 0);
    process.stdout.write('"started"\n');
    for (let i = 1; ; i++) await step(args.id, args.tag, i);
  default:
    throw new Error(`unknown op ${args.op}`);
}
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exit(0);
