import { execFile } from 'node:child_process';
import {
  closeSync,
  existsSync,
  fstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  realpathSync,
  renameSync,
  writeFileSync,
} from 'node:fs';
import { realpath } from 'node:fs/promises';
import { delimiter, dirname } from 'node:path';
import { promisify } from 'node:util';
import { SandboxError } from './errors.js';
import { pyenvShimId } from './shim.js';
import { which } from './which.js';

const run = promisify(execFile);

/** An interpreter a tool can run under, as the sandbox will see it. */
export interface Runtime {
  /** The name tools ask for: `python3`, `python3.11`, `node`, `bash`, `sh`. */
  name: string;
  /** Absolute real path of the interpreter binary (every symlink resolved; shims looked through). */
  interpreter: string;
  /** Host paths outside /usr the interpreter needs, bound read-only at the same path. */
  mounts: string[];
  /** Version as the interpreter reports it (`3.11.7`, `v20.20.2`, `5.2.15`), '' when it has none. */
  version: string;
  /**
   * Environment the interpreter should get in the sandbox: for Python, no bytecode writing (its
   * files are read-only there, and each failed write costs time at every import).
   */
  env: Readonly<Record<string, string>>;
}

/**
 * The runtimes found on this host, by name. The base ones (`python3`, `node`, `bash`, `sh`) are
 * found before the table is returned; a versioned alias (`python3.N`) is found on first use
 * unless a cache file remembers it, so `list` grows as aliases are asked for.
 */
export interface RuntimeTable {
  /** Every runtime found so far, sorted by name. */
  readonly list: readonly Runtime[];
  /** The runtime called `name`, if already found; throws `unknown_runtime` otherwise (naming the available ones). */
  get(name: string): Runtime;
  /** The runtime called `name`, finding a versioned alias on first use; rejects with `unknown_runtime`. */
  resolve(name: string): Promise<Runtime>;
  /** Every runtime on this host, after finding the aliases not asked for yet. */
  all(): Promise<readonly Runtime[]>;
}

const BASE_NAMES = ['python3', 'node', 'bash', 'sh'];
const NO_ANSWER = ' (it is on PATH but did not answer as an interpreter)';
/** How long an interpreter has to answer by default; asked again after a timeout, it has three times as long. */
const ANSWER_MS = 10_000;
const slowAnswer = (ms: number) =>
  ` (it is on PATH but did not answer within ${ms / 1000} s, nor ${(3 * ms) / 1000} s when asked again; the host may be overloaded: try again)`;
let cached: Promise<RuntimeTable> | undefined;

/** Options of {@link resolveRuntimes}. */
export interface ResolveRuntimesOptions {
  /** Look again instead of returning the table found earlier in this process. */
  refresh?: boolean;
  /**
   * A file (created if missing) that remembers what each interpreter answered, keyed by the
   * binary's path, inode, size and modification time: a later process skips asking an
   * interpreter that has not changed. A pyenv shim's answer is remembered under what picks its
   * version (shim.ts) and the binary it ran; any other script shim is always asked.
   */
  cacheFile?: string;
  /**
   * How long an interpreter has to answer (default 10 s). After a timeout it is asked once more
   * with three times as long; if that times out too, it is left out of `list` and asked again
   * on its next `resolve`, never taken for absent.
   */
  answerTimeoutMs?: number;
}

/** Bumped whenever what a runtime entry holds changes (2: node's NODE_OPTIONS). */
const CACHE_VERSION = 2;

interface CacheEntry {
  onPath: string;
  /** `real path:inode:size:mtime` of the binary the answer came from, or a pyenv shim's identity (shim.ts). */
  id: string;
  /** For a shim: the identity of the binary it ran, which must still be the same for the answer to hold. */
  target?: string;
  runtime: Runtime;
}

/**
 * Finds `python3`, `node`, `bash`, `sh` and the versioned `python3.N` aliases on PATH, and works
 * out for each the real binary and the least the sandbox must mount for it: nothing for an
 * interpreter under /usr; its installation prefix (read-only) for one elsewhere, such as pyenv's
 * or nvm's. Shims (pyenv's are shell scripts) are looked through by asking the interpreter itself
 * where it lives. The base four are found before the table resolves; an alias on first use
 * (`resolve`, `all`) unless the cache file remembers it. Cached per process; pass `refresh` to
 * look again.
 */
export function resolveRuntimes(options: ResolveRuntimesOptions = {}): Promise<RuntimeTable> {
  if (!cached || options.refresh) cached = findRuntimes(options.cacheFile, options.answerTimeoutMs ?? ANSWER_MS);
  return cached;
}

/** What an answer is remembered under: an ELF binary's identity, or a pyenv shim's (shim.ts); undefined for any other script, asked every time. */
function answerId(path: string): string | undefined {
  return binaryId(path) ?? pyenvShimId(path);
}

/** The identity of an ELF binary, or undefined for a script. */
function binaryId(path: string): string | undefined {
  try {
    const real = realpathSync(path);
    const fd = openSync(real, 'r');
    try {
      const head = Buffer.alloc(4);
      readSync(fd, head, 0, 4, 0);
      if (!head.equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46]))) return undefined;
      const st = fstatSync(fd);
      return `${real}:${st.ino}:${st.size}:${st.mtimeMs}`;
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
}

function readCache(file: string | undefined): Map<string, CacheEntry> {
  const out = new Map<string, CacheEntry>();
  if (!file) return out;
  try {
    const doc = JSON.parse(readFileSync(file, 'utf8')) as { version?: number; entries?: Record<string, CacheEntry> };
    if (doc.version === CACHE_VERSION && doc.entries) for (const [k, v] of Object.entries(doc.entries)) out.set(k, v);
  } catch {
    // absent or unreadable: ask every interpreter
  }
  return out;
}

function writeCache(file: string, entries: Map<string, CacheEntry>): void {
  try {
    // Only the cache's own directory is made: when the directory above it is gone (its owner was
    // removed while interpreters were asked), nothing is recreated there.
    if (!existsSync(dirname(file))) mkdirSync(dirname(file), { mode: 0o700 });
    const tmp = `${file}.tmp-${process.pid}`;
    writeFileSync(tmp, JSON.stringify({ version: CACHE_VERSION, entries: Object.fromEntries(entries) }), { mode: 0o600 });
    renameSync(tmp, file);
  } catch {
    // a cache that cannot be written only costs time next start
  }
}

/**
 * The runtime names this host offers (`python3`, `node`, `bash`, `sh` and `python3.N` aliases
 * found on PATH), without running any interpreter: cheap enough for a server's start, while
 * {@link resolveRuntimes} finds out the rest.
 */
export function runtimeNames(): string[] {
  const names = new Set(BASE_NAMES);
  for (const dir of (process.env.PATH ?? '').split(delimiter).filter(Boolean)) {
    let entries: string[];
    try {
      entries = readdirSync(dir);
    } catch {
      continue;
    }
    for (const e of entries) if (/^python3\.\d+$/.test(e)) names.add(e);
  }
  return [...names].filter((n) => which(n) !== undefined).sort();
}

async function findRuntimes(cacheFile: string | undefined, answerMs: number): Promise<RuntimeTable> {
  const names = runtimeNames();
  const known = readCache(cacheFile);
  const fresh = new Map<string, CacheEntry>();
  // A few at a time: a host with many interpreter shims (pyenv has one per known version) would
  // otherwise start them all at once.
  const limit = pLimit(4);
  /** Interpreters whose last asking timed out: asked again on next use. */
  const slow = new Set<string>();
  /** The remembered answer for `n` when its binary has not changed; undefined when it must be asked. */
  const remembered = (n: string): Runtime | undefined => {
    const onPath = which(n);
    const id = onPath && answerId(onPath);
    const hit = known.get(n);
    if (!onPath || !id || !hit || hit.onPath !== onPath || hit.id !== id) return undefined;
    if (hit.target !== undefined && binaryId(hit.runtime.interpreter) !== hit.target) return undefined;
    fresh.set(n, hit);
    return hit.runtime;
  };
  const ask = (n: string): Promise<Runtime | undefined> =>
    limit(async () => {
      const onPath = which(n);
      if (!onPath) return undefined;
      const id = answerId(onPath);
      // A busy host can make an interpreter slow to answer: after a timeout, ask once more, for
      // longer; if that times out too, it is asked again when next needed (never taken as absent).
      const timedOut = (err: unknown) => (err as { killed?: boolean }).killed === true;
      const r = await findOne(n, answerMs)
        .catch((err) => (timedOut(err) ? findOne(n, 3 * answerMs) : undefined))
        .catch((err) => {
          if (timedOut(err)) slow.add(n);
          return undefined;
        });
      if (r) slow.delete(n);
      // An answer without a version (a timeout) is not remembered: the next process asks again.
      const target = r && id?.startsWith('pyenv:') ? binaryId(r.interpreter) : undefined;
      if (r && id && (r.version !== '' || n === 'sh') && (target || !id.startsWith('pyenv:')))
        fresh.set(n, { onPath, id, ...(target ? { target } : {}), runtime: r });
      return r;
    });
  const save = () => {
    if (cacheFile && (fresh.size !== known.size || [...fresh].some(([k, v]) => known.get(k)?.id !== v.id))) writeCache(cacheFile, fresh);
  };

  // The base runtimes are found now. A versioned alias (python3.N) is found now only when
  // remembered; otherwise on first use: behind pyenv there is a shim per known version, each
  // a shell script that takes ~0.1–0.3 s to answer, most of them with "not installed".
  const byName = new Map<string, Runtime>();
  const later = new Set<string>();
  const found = await Promise.all(
    names.map(async (n) => {
      const r = remembered(n) ?? (BASE_NAMES.includes(n) ? await ask(n) : undefined);
      if (!r && (!BASE_NAMES.includes(n) || slow.has(n))) later.add(n);
      return r;
    }),
  );
  for (const r of found) if (r) byName.set(r.name, r);
  for (const n of known.keys()) if (!fresh.has(n) && later.has(n)) fresh.set(n, known.get(n) as CacheEntry);
  save();

  let list: Runtime[] = [];
  const relist = () => {
    list = [...byName.values()].sort((a, b) => a.name.localeCompare(b.name));
  };
  relist();
  const asking = new Map<string, Promise<Runtime | undefined>>();
  const failed = new Set<string>();
  const unknown = (name: string, why = '') => {
    const unchecked = [...later].filter((n) => !byName.has(n) && !failed.has(n) && n !== name);
    const more = unchecked.length > 0 ? ` (and on PATH, not checked yet: ${unchecked.join(', ')})` : '';
    return new SandboxError(
      'unknown_runtime',
      `unknown runtime "${name}"${why}: this host has ${list.map((x) => x.name).join(', ') || 'none'}${more}; install the interpreter or pick one of those`,
    );
  };
  const resolve = async (name: string): Promise<Runtime> => {
    const r = byName.get(name);
    if (r) return r;
    let p = asking.get(name);
    if (!p) {
      if (!later.has(name)) throw unknown(name);
      p = ask(name).then((a) => {
        if (a) {
          byName.set(name, a);
          relist();
          save();
        } else if (slow.has(name)) asking.delete(name);
        else failed.add(name);
        return a;
      });
      asking.set(name, p);
    }
    const a = await p;
    if (!a) throw unknown(name, slow.has(name) ? slowAnswer(answerMs) : NO_ANSWER);
    return a;
  };
  return {
    get list() {
      return list;
    },
    get(name: string): Runtime {
      const r = byName.get(name);
      if (!r) throw unknown(name, failed.has(name) ? NO_ANSWER : later.has(name) ? ' (not looked up yet: use resolve())' : '');
      return r;
    },
    resolve,
    async all() {
      await Promise.all([...later].map((n) => resolve(n).catch(() => undefined)));
      return list;
    },
  };
}

/**
 * Node's environment in the sandbox. V8 reserves about 10 GiB of address space for each
 * WebAssembly memory to catch out-of-bounds accesses with a trap handler; under the sandbox's
 * address-space limit that reservation fails, and with it `fetch` (its HTTP parser is wasm) and
 * any wasm a tool loads. Without the handler, V8 checks bounds in code instead. The flag exists
 * from Node 20.15 and 22.2.
 */
function nodeEnv(version: string): Record<string, string> {
  const [major = 0, minor = 0] = version.replace(/^v/, '').split('.').map(Number);
  const supported = major > 22 || (major === 22 && minor >= 2) || (major === 20 && minor >= 15);
  return supported ? { NODE_OPTIONS: '--disable-wasm-trap-handler' } : {};
}

/** Runs at most `n` of the functions given to it at a time, in the order given. */
function pLimit(n: number): <T>(fn: () => Promise<T>) => Promise<T> {
  let active = 0;
  const queue: (() => void)[] = [];
  const next = () => {
    if (active < n) {
      const start = queue.shift();
      if (start) {
        active++;
        start();
      }
    }
  };
  return (fn) =>
    new Promise((resolve, reject) => {
      queue.push(() => {
        fn()
          .then(resolve, reject)
          .finally(() => {
            active--;
            next();
          });
      });
      next();
    });
}

async function findOne(name: string, timeout: number): Promise<Runtime | undefined> {
  const onPath = which(name);
  if (!onPath) return undefined;
  if (name.startsWith('python')) {
    const code = 'import sys, json; print(json.dumps([sys.executable, sys.base_prefix, sys.version.split()[0]]))';
    const { stdout } = await run(onPath, ['-I', '-c', code], { timeout });
    const [exe, prefix, version] = JSON.parse(stdout) as [string, string, string];
    const interpreter = await realpath(exe);
    const mounts = interpreter.startsWith('/usr/') ? [] : [await realpath(prefix)];
    if (mounts.length > 0 && !interpreter.startsWith(`${mounts[0]}/`)) mounts.push(interpreter);
    return { name, interpreter, mounts, version, env: { PYTHONDONTWRITEBYTECODE: '1' } };
  }
  if (name === 'node') {
    // The node this process runs on answers without a spawn.
    if ((await realpath(onPath)) === (await realpath(process.execPath))) {
      const interpreter = await realpath(process.execPath);
      return {
        name,
        interpreter,
        mounts: interpreter.startsWith('/usr/') ? [] : [interpreter],
        version: process.version,
        env: nodeEnv(process.version),
      };
    }
    const { stdout } = await run(onPath, ['-p', 'JSON.stringify([process.execPath, process.version])'], { timeout });
    const [exe, version] = JSON.parse(stdout) as [string, string];
    const interpreter = await realpath(exe);
    // Node is one self-contained binary: outside /usr, that file is all it needs.
    return { name, interpreter, mounts: interpreter.startsWith('/usr/') ? [] : [interpreter], version, env: nodeEnv(version) };
  }
  const interpreter = await realpath(onPath);
  let version = '';
  if (name === 'bash') {
    // The version is only a label here (and part of cache keys): bash without one still runs.
    // --norc: with stdin a socket (Node's pipes are socket pairs) and no SHLVL, bash takes itself
    // for a remote shell and runs the user's ~/.bashrc, which may do anything, or wait forever.
    const out = await run(interpreter, ['--norc', '--noprofile', '-c', 'echo "$BASH_VERSION"'], { timeout }).catch(() => undefined);
    version = out ? out.stdout.trim().replace(/\(.*$/, '') : '';
  }
  return { name, interpreter, mounts: interpreter.startsWith('/usr/') ? [] : [interpreter], version, env: {} };
}
