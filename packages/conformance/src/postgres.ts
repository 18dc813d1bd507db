import { execFile, spawn } from 'node:child_process';
import { accessSync, constants, existsSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { appendFile, chown, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import pg from 'pg';

const run = promisify(execFile);

/** The command that installs the server binaries, for messages. */
export const POSTGRES_INSTALL_HINT = 'apt-get install -y postgresql (or: bash scripts/setup.sh)';

/** Stable codes of {@link PostgresHarnessError}. */
export type PostgresHarnessErrorCode = 'postgres_missing' | 'postgres_user_missing' | 'postgres_failed';

/** Why a throwaway server could not be started or stopped; `code` is stable, the message says what to do. */
export class PostgresHarnessError extends Error {
  override readonly name = 'PostgresHarnessError';
  readonly code: PostgresHarnessErrorCode;
  constructor(code: PostgresHarnessErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** Options of {@link startPostgres}. */
export interface StartPostgresOptions {
  /** Extra server settings written to postgresql.conf (name → value, quoted for you). */
  settings?: Record<string, string | number>;
  /** Directory of initdb, pg_ctl and postgres (default: PATH, else the highest /usr/lib/postgresql/N/bin). */
  bin?: string;
  /** The process whose death stops the server and removes its dir (default: this process). */
  ownerPid?: number;
}

/** A running throwaway PostgreSQL cluster, reachable only through a Unix socket in {@link dir}. */
export interface PostgresServer {
  /** Connection string of the `postgres` database as superuser `forge` (trust auth, no password). */
  readonly url: string;
  /** The temp dir holding the cluster (`data/`), the socket and the server log (`server.log`). */
  readonly dir: string;
  /** The postmaster's pid. */
  readonly pid: number;
  /** Milliseconds taken by initdb and by the server start. */
  readonly timings: { initdbMs: number; startMs: number };
  /** Creates a fresh, empty database (named `name`, or a new unique name) and returns its connection string. */
  database(name?: string): Promise<string>;
  /** Stops the server (`pg_ctl stop -m fast`), then removes {@link dir}. Safe to call twice. */
  stop(): Promise<void>;
  /**
   * Restarts the server in place (`pg_ctl restart -m fast`): every connection is terminated, the
   * data stays. Resolves once it accepts connections again ({@link pid} is the new postmaster).
   */
  restart(): Promise<void>;
  /**
   * SIGKILLs the postmaster (its pid read from `postmaster.pid`), waits for its processes to go,
   * removes its System V shared memory segment and then {@link dir}. Safe to call twice.
   */
  kill9(): Promise<void>;
}

interface Binaries {
  bin: string;
  initdb: string;
  pgCtl: string;
}

/** How to run a server binary: as the current user, or (as root) through setpriv as `postgres`. */
interface RunAs {
  uid: number;
  gid: number;
  prefix: string[];
}

/**
 * Starts a throwaway PostgreSQL cluster for one test file: `initdb` in a fresh temp dir (prefix
 * `forge-pg-`), a server listening only on a Unix socket in that dir, trust auth for superuser
 * `forge`, fsync on. As root, the cluster runs as the `postgres` system user (PostgreSQL refuses
 * root); otherwise as the current user. Binaries come from PATH, else the highest
 * /usr/lib/postgresql/<major>/bin. Throws {@link PostgresHarnessError}: `postgres_missing` (with
 * the install command), `postgres_user_missing`, `postgres_failed` (with the server's output); in
 * every case nothing is left behind. Stop it in `afterAll` with `stop()`; a watchdog process stops
 * it and removes the dir should the calling process die first.
 */
export async function startPostgres(options: StartPostgresOptions = {}): Promise<PostgresServer> {
  const bins = findBinaries(options.bin);
  const as = runAs();
  const dir = await mkdtemp(join(tmpdir(), 'forge-pg-'));
  const data = join(dir, 'data');
  let watchdog: number | undefined;
  try {
    if (as.prefix.length > 0) await chown(dir, as.uid, as.gid);
    const t0 = performance.now();
    // -N: no fsync while initdb writes the template files (the running server does fsync).
    await exec(as, bins.initdb, ['-D', data, '-U', 'forge', '-A', 'trust', '-E', 'UTF8', '--locale=C', '-N'], dir);
    const t1 = performance.now();
    await appendFile(join(data, 'postgresql.conf'), serverConf(dir, options.settings ?? {}));
    await exec(as, bins.pgCtl, ['start', '-w', '-t', '60', '-s', '-D', data, '-l', join(dir, 'server.log')], dir);
    const t2 = performance.now();
    const pid = await postmasterPid(data);
    watchdog = startWatchdog(as, bins, dir, data, options.ownerPid ?? process.pid);
    const server = new Server(dir, data, pid, as, bins, watchdog, { initdbMs: Math.round(t1 - t0), startMs: Math.round(t2 - t1) });
    return server;
  } catch (err) {
    if (watchdog !== undefined) killQuietly(-watchdog);
    await hardStop(data);
    await rm(dir, { recursive: true, force: true });
    if (err instanceof PostgresHarnessError) throw err;
    const log = await readFile(join(dir, 'server.log'), 'utf8').catch(() => '');
    throw new PostgresHarnessError(
      'postgres_failed',
      `could not start a throwaway PostgreSQL server in ${dir} with ${bins.bin}: ${describe(err)}${log ? `\nserver log:\n${log}` : ''}`,
      { cause: err },
    );
  }
}

class Server implements PostgresServer {
  readonly url: string;
  private done: Promise<void> | undefined;
  private count = 0;

  constructor(
    readonly dir: string,
    private readonly data: string,
    public pid: number,
    private readonly as: RunAs,
    private readonly bins: Binaries,
    private readonly watchdog: number,
    readonly timings: { initdbMs: number; startMs: number },
  ) {
    this.url = connectionString(dir, 'postgres');
  }

  async database(name?: string): Promise<string> {
    const db = name ?? `t${process.pid}_${++this.count}`;
    if (!/^[a-z_][a-z0-9_]{0,62}$/.test(db)) {
      throw new Error(`database name "${db}" must be 1–63 lowercase letters, digits or _, not starting with a digit`);
    }
    const client = new pg.Client({ connectionString: this.url });
    await client.connect();
    try {
      await client.query(`CREATE DATABASE "${db}"`);
    } finally {
      await client.end();
    }
    return connectionString(this.dir, db);
  }

  stop(): Promise<void> {
    this.done ??= (async () => {
      killQuietly(-this.watchdog); // its process group: the shell and its sleep
      try {
        await exec(this.as, this.bins.pgCtl, ['stop', '-w', '-t', '60', '-s', '-m', 'fast', '-D', this.data], this.dir);
      } catch {
        await hardStop(this.data); // already dead, or not stopping: no stray server either way
      }
      await rm(this.dir, { recursive: true, force: true });
    })();
    return this.done;
  }

  async restart(): Promise<void> {
    if (this.done) throw new Error('the server was stopped; it cannot be restarted');
    await exec(
      this.as,
      this.bins.pgCtl,
      ['restart', '-w', '-t', '60', '-s', '-m', 'fast', '-D', this.data, '-l', join(this.dir, 'server.log')],
      this.dir,
    );
    this.pid = await postmasterPid(this.data);
  }

  kill9(): Promise<void> {
    this.done ??= (async () => {
      killQuietly(-this.watchdog); // its process group: the shell and its sleep
      await hardStop(this.data);
      await rm(this.dir, { recursive: true, force: true });
    })();
    return this.done;
  }
}

/** `postgres://forge@/<db>?host=<dir>`: the form `pg` (and libpq) read as a Unix-socket directory. */
function connectionString(dir: string, db: string): string {
  return `postgres://forge@/${db}?host=${encodeURIComponent(dir)}`;
}

function serverConf(dir: string, extra: Record<string, string | number>): string {
  const settings: Record<string, string | number> = {
    listen_addresses: '',
    unix_socket_directories: dir,
    unix_socket_permissions: '0700',
    fsync: 'on',
    synchronous_commit: 'on',
    max_connections: 100,
    ...extra,
  };
  const q = (v: string | number) => (typeof v === 'number' ? String(v) : `'${v.replaceAll("'", "''")}'`);
  return `\n# forge throwaway test server\n${Object.entries(settings)
    .map(([k, v]) => `${k} = ${q(v)}`)
    .join('\n')}\n`;
}

/** initdb and pg_ctl from PATH (resolved, so pg_ctl finds its postgres), else the highest /usr/lib/postgresql/N/bin. */
function findBinaries(only?: string): Binaries {
  if (only !== undefined) {
    const b = { bin: only, initdb: join(only, 'initdb'), pgCtl: join(only, 'pg_ctl') };
    if (isExecutable(b.initdb) && isExecutable(b.pgCtl) && isExecutable(join(only, 'postgres'))) return b;
    throw new PostgresHarnessError(
      'postgres_missing',
      `PostgreSQL server binaries not found in ${only} (initdb, pg_ctl and postgres); install them with ${POSTGRES_INSTALL_HINT}, or name the directory that holds them`,
    );
  }
  const candidates: string[] = [];
  for (const d of (process.env.PATH ?? '').split(delimiter)) {
    if (d && isExecutable(join(d, 'initdb'))) candidates.push(dirname(realpathSync(join(d, 'initdb'))));
  }
  const root = '/usr/lib/postgresql';
  const majors = existsSync(root)
    ? readdirSync(root)
        .filter((n) => /^\d+(\.\d+)?$/.test(n))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  for (const m of majors) candidates.push(join(root, m, 'bin'));
  for (const bin of candidates) {
    const b = { bin, initdb: join(bin, 'initdb'), pgCtl: join(bin, 'pg_ctl') };
    if (isExecutable(b.initdb) && isExecutable(b.pgCtl) && isExecutable(join(bin, 'postgres'))) return b;
  }
  throw new PostgresHarnessError(
    'postgres_missing',
    `PostgreSQL server binaries not found (no initdb, pg_ctl and postgres on PATH nor in ${root}/*/bin); the Postgres tests start their own server: install it with ${POSTGRES_INSTALL_HINT}`,
  );
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** The current user, or (as root) the `postgres` system user through setpriv. */
function runAs(): RunAs {
  const uid = process.getuid?.() ?? -1;
  if (uid !== 0) return { uid, gid: process.getgid?.() ?? -1, prefix: [] };
  const line = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('postgres:'));
  const [, , u, g] = line?.split(':') ?? [];
  if (!line || u === undefined || g === undefined || Number(u) === 0) {
    throw new PostgresHarnessError(
      'postgres_user_missing',
      `PostgreSQL refuses to run as root, and there is no "postgres" system user in /etc/passwd to run the test server as; install Debian's package, which creates it (${POSTGRES_INSTALL_HINT}), or run the tests as a non-root user`,
    );
  }
  const prefix = ['setpriv', `--reuid=${u}`, `--regid=${g}`, '--clear-groups', '--'];
  return { uid: Number(u), gid: Number(g), prefix };
}

async function exec(as: RunAs, file: string, args: string[], cwd: string): Promise<void> {
  const [cmd, ...rest] = [...as.prefix, file, ...args] as [string, ...string[]];
  try {
    // cwd: the cluster's dir, which the postgres user can enter (root's cwd may be closed to it).
    await run(cmd, rest, { cwd, env: { ...process.env, LC_ALL: 'C' }, timeout: 120_000 });
  } catch (err) {
    const e = err as { stderr?: string; stdout?: string; message: string };
    throw new Error(`${[file, ...args].join(' ')} failed: ${(e.stderr || e.stdout || e.message).trim()}`, { cause: err });
  }
}

/** The postmaster's pid: line 1 of postmaster.pid. */
async function postmasterPid(data: string): Promise<number> {
  const text = await readFile(join(data, 'postmaster.pid'), 'utf8');
  const pid = Number(text.split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) throw new Error(`${data}/postmaster.pid does not start with a pid`);
  return pid;
}

/**
 * SIGKILLs the cluster's postmaster (when postmaster.pid names a live one), waits for its
 * processes to exit (they do once the postmaster is gone) and removes its System V segment.
 */
async function hardStop(data: string): Promise<void> {
  let text: string;
  try {
    text = await readFile(join(data, 'postmaster.pid'), 'utf8');
  } catch {
    return; // never started, or stopped cleanly
  }
  const lines = text.split('\n');
  const pid = Number(lines[0]);
  const shmid = (lines[6] ?? '').trim().split(/\s+/)[1];
  if (!Number.isInteger(pid) || pid <= 0) return;
  const started = startTime(pid);
  // Only a live process that is a postgres of this data dir: postmaster.pid may be stale.
  if (started === undefined || !isPostmasterOf(pid, data)) return;
  const children = childrenOf(pid);
  killQuietly(pid);
  const procs = [{ pid, started }, ...children];
  const deadline = Date.now() + 15_000;
  while (procs.some((p) => startTime(p.pid) === p.started)) {
    if (Date.now() > deadline) {
      for (const p of procs) if (startTime(p.pid) === p.started) killQuietly(p.pid);
    }
    await sleep(20);
  }
  if (shmid && /^\d+$/.test(shmid)) await run('ipcrm', ['-m', shmid]).catch(() => {});
}

function isPostmasterOf(pid: number, data: string): boolean {
  try {
    const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    return cmd.includes(data);
  } catch {
    return false;
  }
}

/** Field 22 of /proc/<pid>/stat (start time), to tell a process from a later one with its pid. */
function startTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (fields[0] === 'Z') return undefined; // a zombie has exited
    return fields[19];
  } catch {
    return undefined;
  }
}

function childrenOf(ppid: number): { pid: number; started: string }[] {
  const out: { pid: number; started: string }[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === ppid && fields[19]) out.push({ pid: Number(name), started: fields[19] });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** SIGKILL to `pid` (a negative pid: that process group), ignoring a process already gone. */
function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

/**
 * A detached shell that stops the cluster (immediate mode) and removes its dir once the process
 * that started it is gone, so a test worker torn down without its `afterAll` leaves no server.
 */
function startWatchdog(as: RunAs, bins: Binaries, dir: string, data: string, owner: number): number {
  const stop = [...as.prefix, bins.pgCtl, 'stop', '-s', '-w', '-m', 'immediate', '-D', data].map(shq).join(' ');
  const script = `cd / ; while kill -0 ${owner} 2>/dev/null; do sleep 1; done; cd ${shq(dir)} && ${stop}; cd / ; rm -rf ${shq(dir)}`;
  const child = spawn('sh', ['-c', script], { detached: true, stdio: 'ignore' });
  child.unref();
  if (child.pid === undefined) throw new Error('could not start the watchdog shell');
  return child.pid;
}

function shq(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
