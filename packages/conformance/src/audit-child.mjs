// A writer process of the audit store conformance suite (src/audit.ts).
//
//   FORGE_AUDIT_CHILD_OPEN='{"module": …, "export": …, "args": […]}' node audit-child.mjs <id> <count> <window>
//
// Opens the store with `(await import(module))[export](...args)`, prints "ready", waits for a
// "go" line on stdin, then appends <count> entries (0: until killed) of type "t.write" with data
// {writer: <id>, i: 0, 1, …}, at most <window> at a time, printing "ack <i> <seq> <hash>" for each
// one acknowledged (stdout is a pipe: each write is done before the next line is printed), then
// closes the store and prints "done". Any failure goes to stderr with exit code 1.
import { isAbsolute } from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';

const [id, countArg, windowArg] = process.argv.slice(2);
const count = Number(countArg);
const window = Math.max(1, Number(windowArg) || 1);

function fail(message) {
  process.stderr.write(`audit-child ${id}: ${message}\n`);
  process.exit(1);
}

let spec;
try {
  spec = JSON.parse(process.env.FORGE_AUDIT_CHILD_OPEN ?? '');
} catch {
  fail('FORGE_AUDIT_CHILD_OPEN must hold {"module", "export", "args"} as JSON');
}
const specifier = isAbsolute(spec.module) ? pathToFileURL(spec.module).href : spec.module;
const mod = await import(specifier);
const openFn = mod[spec.export];
if (typeof openFn !== 'function') fail(`${spec.module} has no function export "${spec.export}"`);
const log = await openFn(...(spec.args ?? []));
process.stdout.write('ready\n');

const lines = createInterface({ input: process.stdin });
await new Promise((resolve) => {
  lines.on('line', (l) => {
    if (l.trim() === 'go') resolve();
  });
  lines.on('close', resolve);
});
lines.close();

let next = 0;
async function lane() {
  while (count === 0 || next < count) {
    const i = next++;
    const r = await log.append('t.write', { writer: id, i });
    process.stdout.write(`ack ${i} ${r.seq} ${r.hash}\n`);
  }
}
try {
  await Promise.all(Array.from({ length: window }, lane));
  await log.close();
} catch (err) {
  fail(`${err?.code ?? 'error'}: ${err?.message ?? err}`);
}
process.stdout.write('done\n');
