import { accessSync, closeSync, constants, existsSync, lstatSync, openSync, readFileSync, statfsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { EffectivePolicy } from '@forge/policy';
import { DEFAULT_WARM_POOL_BYTES, describeRunLimits, probe, resolveRuntimes, runSandboxed, userTasks, warmBudget } from '@forge/sandbox';
import type { Check } from './doctor-check.js';
import { fileSystemChecks } from './doctor-fs.js';
import { checkPolicies } from './policy-check.js';
import { storeUrl } from './store.js';
import { warmFromEnv } from './warm-env.js';

export interface DoctorReport {
  ok: boolean;
  checks: Check[];
  bwrap?: { path: string; version: string };
  /** The host uid and gid every sandbox runs as. */
  sandboxUser?: { uid: number; gid: number; droppedFromRoot: boolean };
  /** How each limit holds: for the whole run (cgroup), for the run's own tasks (userns, processes) or per process (rlimit); one sentence each in explain. */
  limits?: { memory: string; cpu: string; pids: string; notes: string[]; explain: Record<string, string> };
  runtimes: { name: string; version: string; interpreter: string }[];
  paths: { home: string; project: string; auditLog: string; vault: string; userPolicy: string; workspacePolicy: string; rules: string };
}

/** Runtimes a newcomer's tools are written in: missing ones are problems, not notes. */
const EXPECTED_RUNTIMES = ['python3', 'node', 'bash'];

/**
 * Probes the host the way a call would: the sandbox (bwrap, namespaces, /proc, limits), the
 * runtimes found, forge's home, whether the audit log takes appends, the vault's permissions and
 * the policy files. Every problem carries its fix. Reads only; creates nothing.
 */
export async function diagnose(o: { home: string; project: string; env: NodeJS.ProcessEnv; bwrapPath?: string }): Promise<DoctorReport> {
  const paths = {
    home: o.home,
    project: o.project,
    auditLog: `${o.home}/audit/forge.log`,
    vault: o.env.FORGE_SECRET_VAULT || `${o.home}/secrets.json`,
    userPolicy: `${o.home}/policy.json`,
    workspacePolicy: `${o.project}/.forge/policy.json`,
    rules: `${o.project}/.forge/policy.rules`,
  };
  const checks: Check[] = [];
  const [host, table] = await Promise.all([probe(o.bwrapPath ? { bwrapPath: o.bwrapPath } : {}), resolveRuntimes()]);
  // Every runtime, the versioned aliases included (found on first use elsewhere).
  const runtimes = { list: await table.all() };

  if (host.ok) {
    checks.push({
      name: 'sandbox',
      ok: true,
      detail: `bwrap ${host.bwrap?.version} at ${host.bwrap?.path}; namespaces and /proc work`,
    });
  }
  for (const p of host.problems) checks.push({ name: 'sandbox', ok: false, detail: `${p.message} [${p.code}]`, fix: p.fix });
  // Who the tool runs as on the host: never root (the probe refuses, with the fix, where it cannot say so).
  if (host.identity) {
    const root = host.identity.drop.length > 0;
    checks.push({
      name: 'sandbox uid',
      ok: host.identity.uid !== 0,
      detail: root
        ? `forge runs as root, so every sandbox runs as the unprivileged host uid ${host.identity.uid} (gid ${host.identity.gid}; FORGE_SANDBOX_UID picks another), dropped with setpriv before bwrap starts; no uid of a sandbox maps to host root`
        : `every sandbox runs as this user (host uid ${host.identity.uid}), uid 1000 inside`,
    });
  }
  // Which limits hold for a whole run, and which only per process (never silently): one line each.
  const limits = describeRunLimits(host);
  const notes = (prefix: string) => limits.notes.filter((n) => n.startsWith(prefix));
  const limitCheck = (name: string, detail: string, prefix: string): Check => {
    const n = notes(prefix)[0];
    // A note holds the why and the fix: only the fix goes on the fix line.
    const fix = n ? /fix: (.*)$/.exec(n)?.[1] : undefined;
    return { name, ok: true, detail, ...(fix ? { warn: true, fix } : {}) };
  };
  checks.push(limitCheck('limit memory', `${limits.memory}: ${limits.explain.memory}`, 'memory:'));
  checks.push(limitCheck('limit cpu time', `${limits.cpu}: ${limits.explain.cpu}`, 'cpu:'));
  checks.push(limitCheck('limit cpu rate', limits.explain.cpuRate, 'cpu rate:'));
  checks.push(limitCheck('limit processes', `${limits.pids}: ${limits.explain.pids}`, 'pids:'));
  checks.push({
    name: 'run cgroups',
    ok: true,
    detail: limits.cgroup ? `each run gets a cgroup under ${limits.cgroup.bases.join(', ')}` : `none: ${limits.cgroupsWhy}`,
  });
  if (host.ok) checks.push(await trialRunCheck(host.identity?.uid), warmCheck(o.env));

  const found = new Map(runtimes.list.map((r) => [r.name, r]));
  for (const name of EXPECTED_RUNTIMES) {
    const r = found.get(name);
    checks.push(
      r
        ? { name: `runtime ${name}`, ok: true, detail: `${r.version || 'present'} (${r.interpreter})` }
        : {
            name: `runtime ${name}`,
            ok: false,
            detail: `${name} not found on PATH: tools with runtime "${name}" cannot run`,
            fix: `apt-get install -y ${name === 'node' ? 'nodejs' : name}`,
          },
    );
  }
  const others = runtimes.list.filter((r) => !EXPECTED_RUNTIMES.includes(r.name)).map((r) => r.name);
  if (others.length > 0) checks.push({ name: 'runtimes', ok: true, detail: `also: ${others.join(', ')}` });

  checks.push(homeCheck(o.home));
  checks.push(...(await fileSystemChecks(o)));
  const database = await storeChecks(o.env);
  if (database) checks.push(...database);
  else checks.push(auditLogCheck(paths.auditLog), await auditChainCheck(paths.auditLog));
  checks.push(vaultCheck(paths.vault));
  const policy = checkPolicies({ home: o.home, project: o.project });
  for (const f of policy.files.filter((x) => x.status !== 'absent')) {
    checks.push(
      f.status === 'ok'
        ? { name: 'policy', ok: true, detail: `${f.file} is valid${f.rules !== undefined ? ` (${f.rules} rules)` : ''}` }
        : {
            name: 'policy',
            ok: false,
            detail: f.problem?.message ?? f.file,
            fix: `fix that line; nothing runs on a policy file that never loaded (check with: forge policy check ${f.file})`,
          },
    );
  }
  if (policy.files.every((f) => f.status === 'absent'))
    checks.push({ name: 'policy', ok: true, detail: 'no policy files: the bundle defaults apply' });
  checks.push(secretsCheck(policy.effective));
  checks.push(await toolsmithCheck(o.project, policy.effective));
  checks.push(...(await gatewayChecks(o)));
  // What forge keeps in files (tool records, proposals, pins): damage is a problem, never a silent gap.
  checks.push(...(await (await import('./doctor-files.js')).storedFileChecks(o, policy.effective)));

  return {
    ok: checks.every((c) => c.ok),
    checks,
    ...(host.bwrap ? { bwrap: host.bwrap } : {}),
    ...(host.identity
      ? { sandboxUser: { uid: host.identity.uid, gid: host.identity.gid, droppedFromRoot: host.identity.drop.length > 0 } }
      : {}),
    limits: { memory: limits.memory, cpu: limits.cpu, pids: limits.pids, notes: limits.notes, explain: limits.explain },
    runtimes: runtimes.list.map((r) => ({ name: r.name, version: r.version, interpreter: r.interpreter })),
    paths,
  };
}

/**
 * Warm sandboxes: on or off (FORGE_WARM), how many wait (they follow each runtime's calls), and
 * the memory they may hold here and now (FORGE_WARM_POOL_MIB, at most a quarter of what is
 * available). Where that is less than one warm sandbox, warm runs fall back to cold ones: a
 * warning with the fix. A running server's or worker's own pool is in `forge status`.
 */
function warmCheck(env: NodeJS.ProcessEnv): Check {
  const name = 'warm sandboxes';
  let set: ReturnType<typeof warmFromEnv>;
  try {
    set = warmFromEnv(env);
  } catch (err) {
    return {
      name,
      ok: false,
      detail: (err as Error).message,
      fix: 'every command that opens forge refuses to run with it: correct it, or unset it for the default',
    };
  }
  if (set.warm === false) return { name, ok: true, detail: 'off (FORGE_WARM): every Python and Node call starts its own interpreter' };
  const budget = warmBudget(set.warm?.poolBytes ?? DEFAULT_WARM_POOL_BYTES);
  const mib = (b: number) => `${Math.round(b / (1 << 20))} MiB`;
  const available = budget.availableBytes !== undefined ? ` of the ${mib(budget.availableBytes)} available` : '';
  const detail = `Python and Node calls start in warm sandboxes built ahead, as many per runtime as its calls want (up to 4, 8 in all; 1 after a minute idle, 0 after ten), holding at most ${mib(budget.bytes)} here (FORGE_WARM_POOL_MIB, default ${mib(DEFAULT_WARM_POOL_BYTES)}; at most a quarter${available}); forge status shows each server's and worker's`;
  if (budget.bytes >= 16 << 20) return { name, ok: true, detail };
  return {
    name,
    ok: true,
    warn: true,
    detail: `${detail}: less than one warm sandbox, so calls start cold`,
    fix: 'free memory on this host, or set FORGE_WARM=off to start every call cold on purpose',
  };
}

/**
 * A real sandbox with a call's default limits, started beside everything this user runs now, whose
 * shell forks (as every interpreter's start does): a host where namespaces work but a busy user's
 * task count, a process limit or a missing /bin/sh would fail every call says so here, with why.
 */
async function trialRunCheck(uid: number | undefined): Promise<Check> {
  const name = 'trial run';
  const tasks = userTasks(uid);
  const load = tasks ? `the ${tasks.count} processes and threads uid ${uid} runs now (RLIMIT_NPROC ${tasks.limit ?? 'unlimited'})` : '';
  try {
    const r = await runSandboxed({ command: ['/bin/sh', '-c', '/bin/true & /bin/true & wait && echo forked'] });
    if (r.reason === 'exit' && r.exitCode === 0 && r.stdout.toString() === 'forked\n') {
      return {
        name,
        ok: true,
        detail: `a sandbox started and forked with a call's default limits, beside ${load || 'what this user runs'}`,
      };
    }
    return {
      name,
      ok: false,
      detail: `a sandbox started but its shell could not fork (${r.reason}, exit ${r.exitCode ?? r.signal}): ${r.stderrTail.trim() || 'no message'}${load ? `; ${load}` : ''}`,
      fix: "raise this user's process limit (ulimit -u, nproc in /etc/security/limits.conf) or end some of its processes",
    };
  } catch (err) {
    const [detail, fix] = (err as Error).message.split(' — fix: ');
    return { name, ok: false, detail: detail ?? String(err), fix: fix ?? 'see the message' };
  }
}

/**
 * Each upstream server of gateway.json, started the way a call would start it (the start is
 * audited like any): does it start, speak a stable protocol version, run sandboxed, and how many
 * of its tools are approved or withheld. Nothing is started when there is no gateway.json.
 */
async function gatewayChecks(o: { home: string; project: string; env: NodeJS.ProcessEnv }): Promise<Check[]> {
  const userFile = join(o.home, 'gateway.json');
  const workspaceFile = join(o.project, '.forge', 'gateway.json');
  if (!existsSync(userFile) && !existsSync(workspaceFile))
    return [{ name: 'gateway', ok: true, detail: `no gateway.json (${userFile}): no upstream MCP servers` }];
  const { withGateway } = await import('./commands/gateway.js');
  try {
    return await withGateway(o, async (g) => {
      const config = g.config();
      if (!config.ok)
        return [{ name: 'gateway', ok: false, detail: config.message, fix: 'fix gateway.json (check with: forge gateway list)' }];
      const reports = await g.servers({ probe: true });
      if (reports.length === 0) return [{ name: 'gateway', ok: true, detail: 'gateway.json declares no servers' }];
      return reports.map((r): Check => {
        const name = `gateway ${r.name}`;
        const where = `${r.transport}, ${r.from}-level`;
        if (r.state !== 'running' || r.error) {
          return {
            name,
            ok: false,
            detail: `${where}: does not start or answer: ${r.error ?? r.state}`,
            fix: `check its command, args and binds in gateway.json; forge gateway tools ${r.name} shows the whole error`,
          };
        }
        const speaks = `speaks MCP ${r.protocolVersion ?? '?'}${r.serverInfo ? ` (${r.serverInfo.name} ${r.serverInfo.version})` : ''}`;
        const tools = `${r.tools.approved} tool(s) approved, ${r.tools.withheld ?? 0} withheld until approved`;
        if (!r.sandboxed && r.transport === 'stdio') {
          return {
            name,
            ok: true,
            warn: true,
            detail: `${where}: NOT SANDBOXED (unsandboxed: true): it runs on the host as this user, with this user's files and network; ${speaks}; ${tools}`,
            fix: 'remove "unsandboxed" from its entry to run it in the sandbox (declare the binds and network it needs)',
          };
        }
        return { name, ok: true, detail: `${where}, ${r.sandboxed ? 'sandboxed' : 'remote (URL)'}; ${speaks}; ${tools}` };
      });
    });
  } catch (err) {
    return [
      {
        name: 'gateway',
        ok: false,
        detail: `the gateway could not be opened: ${(err as Error).message}`,
        fix: 'fix what the message names',
      },
    ];
  }
}

/**
 * The toolsmith as the policy sets it (on, paused, governed for whom) and how many proposals
 * wait for an approver. Reads the proposal files only; an invalid policy file is reported above
 * (and pauses the toolsmith).
 */
async function toolsmithCheck(project: string, effective: EffectivePolicy | undefined): Promise<Check> {
  const name = 'toolsmith';
  if (!effective)
    return {
      name,
      ok: true,
      warn: true,
      detail: 'paused: a policy file is invalid (fail-safe); nothing is proposed or approved until it reads',
    };
  const t = effective.toolsmith;
  if (!t.enabled)
    return { name, ok: true, detail: 'off (policy toolsmith.enabled is false): forge_tool works as configured, no governed forging' };
  const modes = Object.entries(t.mode);
  const governed = modes.filter(([, m]) => m === 'governed').map(([p]) => p);
  const mode = governed.length === 0 ? 'every persona direct' : `governed: ${governed.join(', ')}`;
  const { openProposalStore } = await import('@forge/toolsmith');
  let waiting: number | string;
  try {
    waiting = (await openProposalStore({ dir: join(project, '.forge', 'toolsmith') }).list({ state: 'validated' })).length;
  } catch (err) {
    return { name, ok: false, detail: `the proposals cannot be read: ${(err as Error).message}`, fix: 'fix what the message names' };
  }
  const approvers = t.approvers.length === 0 ? 'no approvers' : `approvers ${t.approvers.join(', ')}`;
  const allow = t.capability_allow.length === 0 ? 'no capability may be authored' : `capabilities ${t.capability_allow.join(', ')}`;
  const detail = `${t.paused ? 'PAUSED (policy toolsmith.paused)' : 'on'}; ${mode}; ${allow}; ${approvers}; ${waiting} proposal(s) awaiting approval${
    waiting ? ' (forge toolsmith list --state validated)' : ''
  }`;
  if (t.approvers.length === 0)
    return { name, ok: true, warn: true, detail, fix: 'add operator identities to policy toolsmith.approvers, or nothing can be approved' };
  return t.paused
    ? { name, ok: true, warn: true, detail, fix: 'set policy toolsmith.paused to false to resume' }
    : { name, ok: true, detail };
}

function homeCheck(home: string): Check {
  if (!existsSync(home)) return { name: 'home', ok: true, detail: `${home} (created on first use)` };
  const st = statSync(home);
  if (!st.isDirectory())
    return { name: 'home', ok: false, detail: `${home} is not a directory`, fix: `move it away, or point FORGE_HOME elsewhere` };
  if ((st.mode & 0o077) !== 0) {
    return {
      name: 'home',
      ok: false,
      detail: `${home} is mode ${octal(st.mode)}: other users can read forge's tools and audit log`,
      fix: `chmod 700 ${home}`,
    };
  }
  return { name: 'home', ok: true, detail: `${home} (mode ${octal(st.mode)})` };
}

/** Below this much free space on the audit log's filesystem, forge is about to refuse every call. */
export const AUDIT_MIN_FREE_BYTES = 1 << 20;

/**
 * Whether forge can append to its audit log, without writing an entry: the directory takes new
 * files (lock, checkpoints), the log opens for append, and the filesystem has space and inodes
 * left. forge answers nothing it cannot audit (`audit_unavailable`), so each of these stops it.
 */
export function auditLogCheck(log: string): Check {
  const dir = dirname(log);
  const name = 'audit log';
  if (!existsSync(dir)) return { name, ok: true, detail: `${dir} (created on first use)` };
  const unwritable = (what: string, err: unknown): Check => {
    const code = (err as NodeJS.ErrnoException).code ?? 'unknown';
    return {
      name,
      ok: false,
      detail: `${what} cannot be written (${code}): forge refuses every call and forge with audit_unavailable`,
      fix:
        code === 'EROFS'
          ? `remount the filesystem holding ${dir} read-write, or point FORGE_HOME at a writable place`
          : `make ${dir} writable by this user (chown $(id -u) ${dir}; chmod 700 ${dir})`,
    };
  };
  try {
    accessSync(dir, constants.W_OK);
  } catch (err) {
    return unwritable(dir, err);
  }
  if (existsSync(log)) {
    try {
      // Opened for append and closed: the append path works, and nothing is written.
      closeSync(openSync(log, constants.O_WRONLY | constants.O_APPEND));
    } catch (err) {
      return unwritable(log, err);
    }
  }
  const fs = statfsSync(dir);
  const free = fs.bavail * fs.bsize;
  if (free < AUDIT_MIN_FREE_BYTES || (fs.files > 0 && fs.ffree === 0)) {
    return {
      name,
      ok: false,
      detail: `${dir} has ${free} bytes${fs.files > 0 ? ` and ${fs.ffree} inodes` : ''} free (under ${AUDIT_MIN_FREE_BYTES}): appends fail with ENOSPC soon or now, and forge then refuses every call and forge with audit_unavailable`,
      fix: `free space on the filesystem holding ${dir} (or raise the quota); forge takes calls again at the next call once an append succeeds`,
    };
  }
  return { name, ok: true, detail: `${log} is writable (${Math.floor(free / 1048576)} MiB free)` };
}

/**
 * Whether forge will append to its audit log's chain, read only, and from its first entry: the
 * engine reads a log of up to 16 MiB whole when it opens it (a larger one from its newest
 * checkpoint on), and doctor is where damage before that checkpoint is found too. A broken chain
 * makes forge refuse every call and forge with audit_unavailable; a log behind its checkpoint
 * stops it from starting.
 */
export async function auditChainCheck(log: string): Promise<Check> {
  const name = 'audit chain';
  if (!existsSync(log)) return { name, ok: true, detail: `${log} has no entries yet` };
  const { verifyLog } = await import('@forge/audit-chain');
  let r: Awaited<ReturnType<typeof verifyLog>>;
  try {
    r = await verifyLog(log);
  } catch (err) {
    return { name, ok: false, detail: `${log} cannot be read: ${(err as Error).message}`, fix: `make ${log} readable by this user` };
  }
  const b = r.first_bad;
  if (!b) return { name, ok: true, detail: `all ${r.entries} entries of ${log} verify` };
  const entry = `${log}: entry ${b.seq} (${b.file}${b.line > 0 ? ` line ${b.line}` : ''}) ${b.reason}: ${b.message}`;
  if (b.reason === 'torn_tail')
    return { name, ok: true, warn: true, detail: `${entry}; forge moves it aside (a .recovered file) and goes on at its next start` };
  if (b.reason === 'truncated' || b.reason === 'rollback')
    return {
      name,
      ok: false,
      detail: `${entry}; forge does not start on a log behind its checkpoint (log_behind_checkpoint)`,
      fix: `see it with: forge audit verify; restore ${log} from a backup, or, once checked, re-anchor it (forge audit anchor --reason …, recorded in the log)`,
    };
  return {
    name,
    ok: false,
    detail: `${entry}; the chain is broken there: forge refuses every call and forge with audit_unavailable rather than append to it (it reads a log of up to 16 MiB whole at start, a larger one from its newest checkpoint on)`,
    fix: `see it with: forge audit verify; restore ${log} from a backup, or move ${dirname(log)} aside (keep it as evidence) so forge starts a new log (with FORGE_AUDIT_KEY set, anchor that one: forge audit anchor --reason …)`,
  };
}

/**
 * How the secrets policy grants reach runs: which are delivered by placeholder (their values never
 * enter a sandbox) and which still enter sandboxes in their environment (policy `secret_delivery`).
 */
function secretsCheck(effective: EffectivePolicy | undefined): Check {
  const name = 'secrets';
  if (!effective) return { name, ok: true, detail: 'a policy file is invalid (reported above): no secret is delivered until it reads' };
  const granted = [...new Set(Object.values(effective.persona_secret_allow).flat())].sort();
  if (granted.length === 0) return { name, ok: true, detail: 'policy persona_secret_allow grants no secret to any persona' };
  const injected = granted.filter((n) => Object.hasOwn(effective.secret_delivery, n) && effective.secret_delivery[n] !== 'env');
  const env = granted.filter((n) => !injected.includes(n));
  const parts = [
    ...(injected.length > 0 ? [`by placeholder, never in a sandbox: ${injected.join(', ')}`] : []),
    ...(env.length > 0 ? [`in the sandbox's environment: ${env.join(', ')}`] : []),
  ];
  const hint = env.length > 0 ? ' (an HTTP API credential can stay out: policy secret_delivery, "inject")' : '';
  return { name, ok: true, detail: `${granted.length} granted; ${parts.join('; ')}${hint}` };
}

/** The vault's rules as the runner enforces them: a regular file, mode 0600, ours, a JSON object of strings. */
function vaultCheck(vault: string): Check {
  if (!existsSync(vault)) return { name: 'vault', ok: true, detail: `${vault} absent: tools that declare secrets get secret_missing` };
  const st = lstatSync(vault);
  if (!st.isFile())
    return {
      name: 'vault',
      ok: false,
      detail: `${vault} is not a regular file (a symlink is refused)`,
      fix: `replace it with a regular file of mode 0600`,
    };
  if ((st.mode & 0o777) !== 0o600) {
    return {
      name: 'vault',
      ok: false,
      detail: `${vault} is mode ${octal(st.mode)}; forge refuses it (vault_malformed) unless it is 0600`,
      fix: `chmod 600 ${vault}`,
    };
  }
  if (process.getuid && st.uid !== process.getuid()) {
    return {
      name: 'vault',
      ok: false,
      detail: `${vault} is owned by uid ${st.uid}, not this user (${process.getuid()})`,
      fix: `chown $(id -u) ${vault}`,
    };
  }
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(vault, 'utf8'));
  } catch (err) {
    return {
      name: 'vault',
      ok: false,
      detail: `${vault} is not valid JSON: ${(err as Error).message}`,
      fix: `write it as {"NAME": "value", …}`,
    };
  }
  const ok =
    value !== null && typeof value === 'object' && !Array.isArray(value) && Object.values(value).every((v) => typeof v === 'string');
  if (!ok)
    return { name: 'vault', ok: false, detail: `${vault} must be a JSON object of strings`, fix: `write it as {"NAME": "value", …}` };
  return { name: 'vault', ok: true, detail: `${vault} (mode 0600, ${Object.keys(value as object).length} secrets)` };
}

function octal(mode: number): string {
  return `0${(mode & 0o777).toString(8)}`;
}

/** Clock skew between this host and the database past which entries and leases disagree visibly. */
const MAX_SKEW_MS = 2_000;

/**
 * The database of `--store postgres://…` (FORGE_STORE): reachable, migrated (and not by a newer
 * forge), the clock skew against this host, the job queue's depth. Undefined when the store is
 * files (the audit log's own check then runs). Opening applies pending migrations, as every
 * command over the store does.
 */
async function storeChecks(env: NodeJS.ProcessEnv): Promise<Check[] | undefined> {
  let url: string | undefined;
  try {
    url = storeUrl(env);
  } catch (err) {
    return [
      {
        name: 'store',
        ok: false,
        detail: (err as Error).message,
        fix: 'set --store (FORGE_STORE) to postgres://user@host/db, or unset it for files',
      },
    ];
  }
  if (!url) return undefined;
  const pgs = await import('@forge/postgres');
  const where = pgs.redactUrl(url);
  let stores: Awaited<ReturnType<typeof pgs.openPostgresStores>>;
  try {
    stores = await pgs.openPostgresStores(url);
  } catch (err) {
    const message = pgs.redactText((err as Error).message);
    const newer = /newer/.test(message);
    return [
      {
        name: 'store',
        ok: false,
        detail: message,
        fix: newer
          ? 'this database was migrated by a newer forge: run that version here, or point --store at another database'
          : `start the server or fix the connection string (psql "${where}" should connect); the password goes in ~/.pgpass or PGPASSWORD, never in logs`,
      },
    ];
  }
  try {
    const c = await stores.check();
    const out: Check[] = [];
    if (!c.reachable)
      return [{ name: 'store', ok: false, detail: `${where}: ${c.problem ?? 'not reachable'}`, fix: 'check that the server is up' }];
    out.push({ name: 'store', ok: true, detail: `PostgreSQL ${c.server} at ${where}` });
    const m = c.migrations;
    if (m)
      out.push(
        m.unknown.length > 0
          ? { name: 'migrations', ok: false, detail: `applied by a newer forge: ${m.unknown.join(', ')}`, fix: 'run the newer forge here' }
          : {
              name: 'migrations',
              ok: m.pending.length === 0,
              detail: `at version ${m.current} of ${m.latest}${m.pending.length ? `; pending: ${m.pending.join(', ')}` : ''}`,
            },
      );
    if (c.clockSkewMs !== undefined) {
      const skew = Math.abs(c.clockSkewMs);
      out.push({
        name: 'clock skew',
        ok: skew <= MAX_SKEW_MS,
        detail: `this host is ${c.clockSkewMs >= 0 ? 'ahead of' : 'behind'} the database by ${skew} ms`,
        ...(skew > MAX_SKEW_MS
          ? { fix: 'run NTP (chrony, systemd-timesyncd) on this host and the database host: audit timestamps and leases depend on it' }
          : {}),
      });
    }
    if (c.queue)
      out.push({
        name: 'queue',
        ok: true,
        ...(c.queue.pending > 0 && (c.queue.oldestPendingMs ?? 0) > 30_000 ? { warn: true } : {}),
        detail: `${c.queue.pending} pending${c.queue.oldestPendingMs !== undefined ? ` (oldest ${Math.round(c.queue.oldestPendingMs / 1000)} s)` : ''}, ${c.queue.claimed} running, ${c.queue.done} done, ${c.queue.failed} failed`,
      });
    const v = await pgs.verifyPostgresAuditLog(stores.pool);
    out.push(
      v.ok
        ? { name: 'audit log', ok: true, detail: `${v.entries} entries in ${where}, chain intact` }
        : {
            name: 'audit log',
            ok: false,
            detail: `${where}: ${JSON.stringify(v.first_bad ?? v)}`,
            fix: 'export it (forge audit export FILE) and keep the copy; investigate before appending more',
          },
    );
    return out;
  } finally {
    await stores.close();
  }
}
