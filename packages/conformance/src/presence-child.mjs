// A second process of the presence conformance suite (src/presence.ts):
//   node presence-child.mjs '<json>'   JSON: { open: {module, export, args}, names: string[], hold?: boolean }
// Opens the store with `await (await import(module))[export](...args)`, beats each name as a
// worker of this process, prints {"beat": name} after each, then {"done": true}; with `hold` it
// then waits to be killed (its records stay, as a crashed process leaves them).
import { hostname } from 'node:os';
import { isAbsolute } from 'node:path';
import { pathToFileURL } from 'node:url';

const args = JSON.parse(process.argv[2] ?? '{}');
const specifier = isAbsolute(args.open.module) ? pathToFileURL(args.open.module).href : args.open.module;
const store = await (await import(specifier))[args.open.export](...(args.open.args ?? []));
const say = (v) => process.stdout.write(`${JSON.stringify(v)}\n`);
await Promise.all(
  args.names.map(async (name) => {
    await store.beat({ name, kind: 'worker', host: hostname(), pid: process.pid, startedAt: Date.now(), facts: { child: true } });
    say({ beat: name });
  }),
);
say({ done: true });
if (args.hold) setInterval(() => {}, 1 << 30);
