/**
 * Warm interpreters: a sandbox built ahead whose interpreter is already running. A sandbox built
 * ahead (prebuilt.ts) waits as a shell for its run's line; a warm one has gone further: its shell
 * has set the run's limits, marked the start and exec'd the run's own command line, whose script
 * (a per-run file) still holds forge's loader. The loader imports what the runtime's preload
 * list names, says `up` on descriptor 5 and waits there. When a run takes the sandbox, the host
 * copies the tool's code over the loader in that same file and sends the run's environment; the
 * loader closes the channel, sets the environment and runs the file's new content as the
 * program's main module, with the `sys.argv`, `__file__` and `sys.path` the interpreter set up for
 * that file at its start (Node: the loader was required ahead of the main module, and Node then
 * loads that from the file as it would cold: warm-node.ts). The process is the one a cold run
 * would have exec'd, with the same command line, descriptors, limits and identity: the tool sees
 * the difference only in time and in what was imported before it (see README, "Warm
 * interpreters").
 *
 * A warm sandbox serves one run and is then destroyed, as every sandbox built ahead.
 */
import { basename } from 'node:path';
import type { Mount } from './profile.js';
import { checkNodeModule } from './warm-node.js';

/** A run that may be served by a warm interpreter ({@link RunOptions.prebuild}). */
export interface WarmOptions {
  /**
   * Modules the loader imports before it waits (Python: importable names; Node: names require()
   * takes). Default: for Python, the standard modules forged tools use most
   * ({@link DEFAULT_PYTHON_PRELOAD}); for Node, the core module a first write to stdout loads
   * ({@link DEFAULT_NODE_PRELOAD}). One that cannot be imported is skipped: the tool's own import
   * then fails as it would cold. A Node module must print nothing as it loads (its output would
   * be the run's: Node cannot point its descriptors elsewhere).
   */
  preload?: readonly string[];
  /**
   * Variables the interpreter starts with, on top of the sandbox's base ones (`PATH`, `HOME`,
   * `TMPDIR`, `LANG`): those it reads at its start (the runtime's own). They are on the sandbox's
   * command line, so never a secret. The run's whole environment replaces them when a run takes
   * the sandbox; a run whose own such variables differ ({@link startVariables}) is not served warm.
   */
  env?: Readonly<Record<string, string>>;
  /**
   * Memory the waiting warm sandboxes of this process may hold in all before one more of this
   * run's shape is warmed (default 128 MiB), and never more than a quarter of the host's available
   * memory. Past it none is: the shape's runs start cold, and `prebuiltStats().held` says why.
   */
  poolBytes?: number;
}

/** What Python tools import most, loaded ahead by default. */
export const DEFAULT_PYTHON_PRELOAD: readonly string[] = ['json', 'sys', 'os', 'math', 're', 'csv', 'statistics'];

/**
 * What a Node tool's first write to its stdout loads (a pipe's stream is a `net.Socket`): core,
 * loaded ahead by default. About 3.5 ms of a warm call here.
 */
export const DEFAULT_NODE_PRELOAD: readonly string[] = ['node:net'];

/**
 * CPU seconds a warm sandbox's Python interpreter may use before its run, on top of the run's
 * own: it is built with RLIMIT_CPU that much higher, and its loader lowers it to the run's seconds
 * plus what the warm-up used (rounded up), so the run's budget counts from the run. A tool reading
 * its own RLIMIT_CPU sees that second or so more than a cold run would.
 */
export const WARM_CPU_SECONDS = 10;

/**
 * The same room for a warm Node interpreter, which cannot lower its own limits: it starts with
 * RLIMIT_CPU one second above the run's, for its warm-up (about 40 ms of CPU). The run's budget
 * over all its processes is still counted from the run by its cgroup, where there is one.
 */
export const NODE_WARM_CPU_SECONDS = 1;

/** The descriptor a warm loader reads its run from (the sandbox built ahead's control channel). */
export const WARM_FD = 5;

const PYTHON = /^python3(\.\d+)?$/;
const NODE = /^node(js)?$/;
/** Python options that take no value and change nothing a loader relies on (`-i`, `-c`, `-m` are not among them). */
const PYTHON_FLAGS = /^-[BEIOPRSsuqv]+$/;
const MODULE_NAME = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$/;

/** How a run's command can start warm: the loader's language and which per-run file is its script. */
export interface WarmFit {
  kind: 'python' | 'node';
  /** Index of the script among the command's per-run read-only mounts (the sandbox's slots). */
  slot: number;
  /** The script's path in the sandbox. */
  script: string;
}

/**
 * Whether `command` can run warm, given its per-run read-only mounts (in slot order): a Python 3
 * interpreter, value-less options only, then a script; or `node` and a script, with no options.
 * The script must be one of those mounts. A string saying why not, otherwise.
 */
export function warmFit(command: readonly string[], slots: readonly Mount[]): WarmFit | string {
  const [interpreter, ...args] = command;
  const name = basename(interpreter ?? '');
  let kind: WarmFit['kind'];
  let script: string | undefined;
  if (PYTHON.test(name)) {
    kind = 'python';
    script = args.find((a) => !PYTHON_FLAGS.test(a));
  } else if (NODE.test(name)) {
    // An option would have to be kept apart from the loader's: none is warmed.
    if (args[0]?.startsWith('-')) return 'node starts warm only as `node <script> [args]`, without options';
    kind = 'node';
    script = args[0];
  } else {
    return `${name} has no warm loader (python3 and node have)`;
  }
  if (script === undefined) return 'the command names no script';
  const slot = slots.findIndex((m) => (m.target ?? m.source) === script);
  if (slot < 0) return `its script ${script} is not a per-run read-only file`;
  return { kind, slot, script };
}

/**
 * The variables of `env` that the interpreter of `command` reads as it starts, before any of the
 * tool's code (Python: `PYTHON*`, none under -I or -E; Node: `NODE_*`), as one string. A warm
 * interpreter read its own from `warm.env`, so a run whose differ is not served warm: it would not
 * start the way a cold run starts.
 */
export function startVariables(fit: WarmFit, command: readonly string[], env: Readonly<Record<string, string>>): string {
  const options = command.slice(1, command.indexOf(fit.script));
  if (fit.kind === 'python' && options.some((o) => PYTHON_FLAGS.test(o) && /[IE]/.test(o))) return '';
  const prefix = fit.kind === 'python' ? 'PYTHON' : 'NODE_';
  return JSON.stringify(
    Object.entries(env)
      .filter(([k]) => k.startsWith(prefix))
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
  );
}

/** What a runtime's loader preloads when the options name nothing. */
export function defaultPreload(kind: WarmFit['kind']): readonly string[] {
  return kind === 'python' ? DEFAULT_PYTHON_PRELOAD : DEFAULT_NODE_PRELOAD;
}

/** Checks a preload list: module names only (they are written into the loader's source). */
export function checkPreload(kind: WarmFit['kind'], preload: readonly string[]): string | undefined {
  if (kind === 'node') {
    for (const name of preload) {
      const bad = checkNodeModule(name);
      if (bad) return bad;
    }
    return undefined;
  }
  const bad = preload.find((m) => !MODULE_NAME.test(m));
  return bad === undefined
    ? undefined
    : `preload name ${JSON.stringify(bad)} is not a module name; list importable Python module names (letters, digits, _ and dots, e.g. "json" or "xml.etree.ElementTree")`;
}

/**
 * The Python loader, as the script's bytes at warm-up. Everything it defines is gone from the
 * main module's namespace before the tool's code runs in it; a traceback out of the tool shows
 * the tool's frames only, as a cold run's does.
 */
export function pythonLoader(preload: readonly string[]): string {
  const names = preload.map((m) => `'${m}'`).join(', ');
  return `def _forge_warm():
    import os, sys
    # What a module prints as it is imported is not the tool's output: it goes nowhere.
    saved = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    try:
        for name in (${names}${preload.length === 1 ? ',' : ''}):
            try:
                __import__(name)
            except Exception:
                pass
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, to in zip(saved, (1, 2)):
            os.dup2(fd, to)
            os.close(fd)
        os.close(null)
    # What is here now lives as long as the process: the collection at the tool's end (see
    # _forge_end) looks only at what the tool made.
    import gc
    gc.freeze()
    os.write(${WARM_FD}, b"up\\n")
    line = b""
    while not line.endswith(b"\\n"):
        chunk = os.read(${WARM_FD}, 65536)
        if not chunk:
            os._exit(0)
        line += chunk
    os.close(${WARM_FD})
    fields = bytes.fromhex(line.strip().decode("ascii")).split(b"\\0")
    for field in fields[:-1]:
        op, _, rest = field.partition(b"=")
        if op == b"-":
            os.environ.pop(os.fsdecode(rest), None)
        elif op == b"t":
            # The run's CPU seconds, counted from here: the kernel counts this process's from its start.
            import resource
            t = int(rest) - int(-sum(os.times()[:2]) // 1)
            soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
            resource.setrlimit(resource.RLIMIT_CPU, (min(soft, t), min(hard, t + 1)))
        else:
            key, _, value = rest.partition(b"=")
            os.environ[os.fsdecode(key)] = os.fsdecode(value)
    main = sys.modules["__main__"].__dict__
    fail, end = main.pop("_forge_fail"), main.pop("_forge_end")
    del main["_forge_warm"], main["_forge_main"]
    return main, fail, end


def _forge_main(main, fail, end):
    import sys
    path = sys.argv[0]
    try:
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
    except BaseException as e:
        # As the interpreter reports a script it cannot compile: no frames of its own.
        end(main, fail(sys, e, None))
    try:
        exec(code, main)
    except SystemExit as e:
        end(main, e)
    except BaseException as e:
        end(main, fail(sys, e, e.__traceback__.tb_next))
    end(main, 0)


def _forge_fail(sys, e, tb):
    e.__traceback__ = tb
    sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
    sys.excepthook(type(e), e, tb)
    return 1


def _forge_end(main, how):
    # What the interpreter does at exit that a tool can see, in its order (Py_FinalizeEx): wait
    # for non-daemon threads, run atexit, flush stdout and stderr, clear __main__ (its objects'
    # finalizers run: an unclosed file is flushed), flush again; then exit without tearing the
    # interpreter down, which is most of its exit's time. Anything unusual (an exit code that is
    # not a C int, a flush that fails) is left to the interpreter's own exit.
    import sys
    if isinstance(how, SystemExit):
        code = how.code
        if code is None:
            status = 0
        elif isinstance(code, int):
            if not -2**31 <= code < 2**31:
                raise how
            status = code
        else:
            sys.stderr.write(str(code))
            sys.stderr.write("\\n")
            status = 1
    else:
        status = how
    if "threading" in sys.modules:
        sys.modules["threading"]._shutdown()
    import atexit, gc, os
    atexit._run_exitfuncs()

    def flush():
        for f in (sys.stdout, sys.stderr):
            if f is not None and not getattr(f, "closed", False):
                try:
                    f.flush()
                except BaseException:
                    raise SystemExit(status) from None

    flush()
    for every in (False, True):
        for name in list(main):
            if name != "__builtins__" and (every or (name[:1] == "_" and name[:2] != "__")):
                main[name] = None
    gc.collect()
    flush()
    os._exit(status & 0xFF)


_forge_main(*_forge_warm())
`;
}

/**
 * The line a warm loader reads: the run's CPU seconds (its RLIMIT_CPU, raised by what the warm-up
 * used: {@link WARM_CPU_SECONDS}), the start environment's names to drop, then the run's variables
 * (names and values as bytes, which may hold anything but NUL), hex-encoded: one line, once the
 * sandbox built ahead adds its newline.
 */
export function warmLine(drop: readonly string[], env: Readonly<Record<string, string>>, cpuSeconds: number): string {
  const fields = [`t=${cpuSeconds}`, ...drop.map((k) => `-=${k}`), ...Object.entries(env).map(([k, v]) => `+=${k}=${v}`)];
  return Buffer.from(fields.map((f) => `${f}\0`).join(''), 'utf8').toString('hex');
}
