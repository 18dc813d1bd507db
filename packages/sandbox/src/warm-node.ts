/**
 * The Node loader of a warm sandbox (warm.ts). Node has no way to run a file as its main module a
 * second time, so the loader is not the main module: the interpreter starts with
 * `--require <script>` in NODE_OPTIONS, which runs the script (then holding this loader) before
 * the main module, and the loader waits there. When its run comes, the host has already copied the
 * tool's code over it; the loader sets the run's environment, drops its own entry from
 * `require.cache` and returns, and Node goes on to load the main module from that same file, by
 * its own path: as CommonJS or as an ES module, as Node decides for a cold run, with the same
 * `process.argv`, `require.main`, `import.meta.url` and the same frames under an error's stack.
 */

/** A Node module name the loader may require ahead: a builtin (`node:zlib`) or a package name, with a subpath. */
const NODE_MODULE = /^(node:)?(@[a-z0-9][\w.-]*\/)?[A-Za-z0-9_][\w.-]*(\/[\w.-]+)*$/;

/** Why `name` is not a Node module name the loader takes, or undefined. */
export function checkNodeModule(name: string): string | undefined {
  return NODE_MODULE.test(name) && !name.split('/').includes('..')
    ? undefined
    : `preload name ${JSON.stringify(name)} is not a Node module name; list names require() takes (e.g. "node:zlib", "lodash" or "@scope/pkg/sub")`;
}

/**
 * The NODE_OPTIONS a warm Node interpreter starts with: the runtime's own, then the loader as a
 * module required first. Undefined when `script` cannot be written in NODE_OPTIONS as it is.
 */
export function nodeStartOptions(runtimeOptions: string | undefined, script: string): string | undefined {
  if (!/^\/[\w./-]+$/.test(script)) return undefined;
  return [runtimeOptions?.trim(), `--require=${script}`].filter(Boolean).join(' ');
}

/**
 * The loader's source, the script's bytes at warm-up (CommonJS: no `import` or `export`, so Node
 * loads it as such). `fd` is the control channel.
 */
export function nodeLoader(preload: readonly string[], fd: number): string {
  return `'use strict';
(function forgeWarm() {
  const fs = require('node:fs');
  const preload = ${JSON.stringify(preload)};
  // Not muted as Python's are: Node cannot point its descriptors elsewhere, and making its
  // stdout stream early would set O_NONBLOCK on the run's pipe, which a cold tool that never uses
  // process.stdout does not see. A preloaded module must print nothing.
  for (const name of preload) {
    try {
      require(name);
    } catch {}
  }
  fs.writeSync(${fd}, 'up\\n');
  const chunks = [];
  const buf = Buffer.alloc(65536);
  for (;;) {
    const n = fs.readSync(${fd}, buf, 0, buf.length, null);
    if (n === 0) process.exit(0);
    chunks.push(Buffer.from(buf.subarray(0, n)));
    if (buf[n - 1] === 10) break;
  }
  fs.closeSync(${fd});
  // The run's line (warmLine): fields ending in NUL. Node lowers no limit of its own: a warm
  // interpreter's CPU limit was set with a second's room for its warm-up (warm.ts).
  const fields = Buffer.from(Buffer.concat(chunks).toString('latin1').trim(), 'hex');
  let start = 0;
  for (let i = 0; i < fields.length; i++) {
    if (fields[i] !== 0) continue;
    const field = fields.subarray(start, i).toString('utf8');
    start = i + 1;
    const op = field.slice(0, 2);
    const rest = field.slice(2);
    if (op === '-=') delete process.env[rest];
    else if (op === '+=') {
      const eq = rest.indexOf('=');
      process.env[rest.slice(0, eq)] = rest.slice(eq + 1);
    }
  }
  // The main module is loaded afresh from this same file, now the tool's.
  delete require.cache[__filename];
})();
`;
}
