import type { ChildProcess } from 'node:child_process';
import { type Dirent, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { scaled } from '@forge/test-utils';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { beforeAll, describe, expect, it } from 'vitest';
import { type Connected, connect, type Envelope, requireCliAndSandbox, runCli, scratch } from './helpers.js';

beforeAll(requireCliAndSandbox);

/** How long the clients keep going: two minutes in CI; FORGE_CONTENTION_MS shortens it for a quick local run. */
const DURATION_MS = Number(process.env.FORGE_CONTENTION_MS ?? 120_000);
/** The seed of every client's choices: FORGE_CONTENTION_SEED replays them (the interleaving is the machine's). */
const SEED = Number(process.env.FORGE_CONTENTION_SEED ?? Math.floor(Math.random() * 2 ** 32));
const CLIENTS = 4;
/**
 * The shared names: few, so that the clients keep running into each other. Names that differ only
 * by case (alpha, Alpha) or share a wire name (team.delta and team__delta, both team__delta on the
 * wire) share one lock and refuse each other.
 */
const NAMES = ['alpha', 'Alpha', 'beta', 'team.delta', 'team__delta'] as const;
/** Requests each client has in flight, as an agent's parallel tool calls. */
const IN_FLIGHT = 2;
/** What a racing operation may be refused with: someone else removed it, took the name, promoted another. */
const RACE_REFUSALS = new Set(['unknown_tool', 'name_taken', 'promote_conflict']);
/** A request unanswered this long (scaled with the machine) is a hang. */
const ANSWER_MS = scaled(90_000);
/**
 * Entry types of this run: the operations', a gap of a call to a removed tool, and each server's
 * start (policy and gateway configuration loaded). Anything else (registry.load_failed,
 * breaker.open, forge.audit_recovered, …) is a finding.
 */
const EXPECTED_TYPES = new Set([
  'forge.created',
  'forge.called',
  'forge.promoted',
  'forge.removed',
  'toolsmith.gap_recorded',
  'policy.reloaded',
  'gateway.reloaded',
]);
/** Leftovers of a write or a lock: registry temp files and locks, audit staging and lock directories, manifest temp files. */
const LEFTOVER = /\.lock$|\.tmp(?:-|$)|\.released$|\.dead$|\.break-/;

type Op = 'forge' | 'call' | 'promote' | 'remove';
const EVENT: Record<Op, string> = { forge: 'forge.created', call: 'forge.called', promote: 'forge.promoted', remove: 'forge.removed' };

/** One answer a client got: what it asked and the envelope it was told. */
interface Answer {
  client: number;
  session: string;
  op: Op;
  /** The forge name the operation is about. */
  name: string;
  /** The name as the request gave it (a direct call of team.delta asks for team__delta). */
  asked: string;
  env: Envelope;
  /** For a forge: the token its tool answers with. */
  token?: string;
}

interface AuditEntry {
  type: string;
  data: Record<string, unknown>;
}

/** mulberry32: a small seeded generator, so a client's sequence of choices can be replayed. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A tiny tool whose answer says which forge made it (`token`: client and sequence number, so each digest is new). */
function toolSpec(name: string, token: string, runtime: 'python3' | 'bash'): Record<string, unknown> {
  const out = JSON.stringify({ ok: true, data: { name, token } });
  return {
    name,
    description: `contention test tool ${name}, forged as ${token}`,
    runtime,
    input_schema: { type: 'object' },
    impl:
      runtime === 'python3' ? `import sys\nsys.stdin.read()\nprint(${JSON.stringify(out)})\n` : `cat >/dev/null\nprintf '%s\\n' '${out}'\n`,
  };
}

const wire = (name: string) => name.replaceAll('.', '__');

/** The audit entry an answer must have left: type, session, name, outcome and what identifies it. */
function expectedEntry(a: Answer): string {
  const d = (a.env.data ?? {}) as Record<string, unknown>;
  if (!a.env.ok) {
    // A refused call is recorded under the name as asked, or, when a wire name was asked, under
    // the forge name it stood for when the server read it (team__delta → team.delta, removed
    // before it was found): the same wire name either way, which is what is compared.
    const name = a.op === 'call' ? wire(a.asked) : a.name;
    return [EVENT[a.op], a.session, name, 'refused', a.env.error?.kind, a.env.meta?.run_id ?? null].join(' ');
  }
  switch (a.op) {
    case 'forge':
      return [EVENT.forge, a.session, d.name, 'ok', d.scope, `v${d.version}`, d.digest].join(' ');
    case 'call':
      return [EVENT.call, a.session, a.name, 'ok', a.env.meta?.run_id].join(' ');
    case 'promote':
      return [EVENT.promote, a.session, d.name, 'ok', `v${d.version}`, d.digest, d.outcome].join(' ');
    case 'remove':
      return [EVENT.remove, a.session, d.name, 'ok', d.scope, `v${d.version}`].join(' ');
  }
}

/** The same key read from an audit entry (undefined for an entry that is no answer of these four). */
function loggedEntry(e: AuditEntry): string | undefined {
  const d = e.data;
  if (!Object.values(EVENT).includes(e.type)) return undefined;
  if (d.ok !== true) {
    const name = e.type === EVENT.call ? wire(String(d.name)) : d.name;
    return [e.type, d.session, name, 'refused', d.kind, d.run_id ?? null].join(' ');
  }
  switch (e.type) {
    case 'forge.created':
      return [e.type, d.session, d.name, 'ok', d.scope, `v${d.version}`, d.digest].join(' ');
    case 'forge.called':
      return [e.type, d.session, d.name, 'ok', d.run_id].join(' ');
    case 'forge.promoted':
      return [e.type, d.session, d.name, 'ok', `v${d.version}`, d.digest, d.outcome].join(' ');
    default:
      return [e.type, d.session, d.name, 'ok', d.scope, `v${d.version}`].join(' ');
  }
}

/** Keys of `a` not matched one for one in `b` (a multiset difference). */
function unmatched(a: string[], b: string[]): string[] {
  const left = new Map<string, number>();
  for (const k of b) left.set(k, (left.get(k) ?? 0) + 1);
  const out: string[] = [];
  for (const k of a) {
    const n = left.get(k) ?? 0;
    if (n > 0) left.set(k, n - 1);
    else out.push(k);
  }
  return out;
}

const exitOf = (child: ChildProcess) =>
  new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => {
    if (child.exitCode !== null || child.signalCode !== null) r({ code: child.exitCode, signal: child.signalCode });
    else child.once('exit', (code, signal) => r({ code, signal }));
  });

/** Every path under `dir` (relative to `root`) whose name is a leftover of a write or a lock. */
function leftovers(root: string, dir = root): string[] {
  let entries: Dirent[];
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  const out: string[] = [];
  for (const e of entries) {
    const p = join(dir, e.name);
    if (LEFTOVER.test(e.name)) out.push(relative(root, p));
    if (e.isDirectory()) out.push(...leftovers(root, p));
  }
  return out;
}

/** The stored tool files of one scope directory: the live ones and every kept version, parsed. */
function storedTools(toolsDir: string): { live: Map<string, { version: number; digest: string }>; kept: Map<string, number[]> } {
  const live = new Map<string, { version: number; digest: string }>();
  const kept = new Map<string, number[]>();
  const parse = (path: string) => JSON.parse(readFileSync(path, 'utf8')) as { name: string; version: number; digest: string };
  let files: string[] = [];
  try {
    files = readdirSync(toolsDir);
  } catch {}
  for (const f of files.filter((f) => f.endsWith('.json'))) {
    const t = parse(join(toolsDir, f));
    expect(`${t.name}.json`, join(toolsDir, f)).toBe(f);
    live.set(t.name, { version: t.version, digest: t.digest });
  }
  let names: string[] = [];
  try {
    names = readdirSync(join(toolsDir, '.versions'));
  } catch {}
  for (const name of names) {
    const versions: number[] = [];
    for (const f of readdirSync(join(toolsDir, '.versions', name))) {
      const t = parse(join(toolsDir, '.versions', name, f));
      expect({ name: t.name, file: f }).toEqual({ name, file: `${t.version}.json` });
      versions.push(t.version);
    }
    kept.set(
      name,
      versions.sort((x, y) => x - y),
    );
  }
  return { live, kept };
}

/** One agent: random operations over the shared names until `deadline`, every answer checked and kept. */
async function agent(i: number, lane: number, c: Connected, session: string, deadline: number, answers: Answer[]): Promise<void> {
  const rand = seeded(SEED + i * IN_FLIGHT + lane);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;
  let forged = 0;
  const ask = async (tool: string, args: Record<string, unknown>): Promise<Envelope> => {
    const what = `client ${i} lane ${lane} (seed ${SEED}): ${tool} ${JSON.stringify(args).slice(0, 200)}`;
    let result: CallToolResult;
    try {
      result = (await c.client.callTool({ name: tool, arguments: args }, undefined, { timeout: ANSWER_MS })) as CallToolResult;
    } catch (err) {
      throw new Error(`${what} got no answer: ${String(err)}; server stderr: ${c.stderr().slice(-2000)}`);
    }
    const first = result.content[0];
    const env = JSON.parse(first?.type === 'text' ? first.text : 'null') as Envelope;
    expect(typeof env?.ok, `${what}: not an envelope: ${JSON.stringify(result)}`).toBe('boolean');
    expect(result.isError === true, `${what}: isError disagrees with the envelope`).toBe(!env.ok);
    if (!env.ok && !RACE_REFUSALS.has(env.error?.kind ?? ''))
      throw new Error(`${what} was refused with an unexpected kind: ${JSON.stringify(env)}; server stderr: ${c.stderr().slice(-2000)}`);
    return env;
  };
  while (Date.now() < deadline) {
    const name = pick(NAMES);
    const r = rand();
    if (r < 0.3) {
      const token = `c${i}.${lane}-${++forged}`;
      const args = { ...toolSpec(name, token, rand() < 0.5 ? 'python3' : 'bash'), ...(rand() < 0.5 ? { overwrite: true } : {}) };
      const env = await ask('forge_tool', args);
      if (env.ok) expect(env.data, `client ${i}.${lane}: forge of ${name}`).toMatchObject({ name, scope: 'project' });
      answers.push({ client: i, session, op: 'forge', name, asked: name, env, token });
    } else if (r < 0.65) {
      // Through forge_call, or directly under its wire name as a client that listed it would.
      const direct = rand() < 0.3;
      const asked = direct ? wire(name) : name;
      const env = direct ? await ask(asked, {}) : await ask('forge_call', { name, input: {} });
      // team__delta is the tool of that name if there is one, else the one whose wire name it is (team.delta).
      const answered = (env.data as { name?: string } | undefined)?.name;
      if (env.ok)
        expect([answered, wire(answered ?? '')], `client ${i}.${lane}: call of ${asked}: ${JSON.stringify(env)}`).toContain(asked);
      answers.push({ client: i, session, op: 'call', name: env.ok ? (answered as string) : name, asked, env });
    } else if (r < 0.8) {
      const env = await ask('forge_promote', { name, ...(rand() < 0.3 ? { force: true } : {}) });
      if (env.ok) expect(env.data, `client ${i}.${lane}: promote of ${name}`).toMatchObject({ name, scope: 'user' });
      answers.push({ client: i, session, op: 'promote', name, asked: name, env });
    } else if (r < 0.97) {
      const scope = pick([undefined, undefined, 'project', 'user'] as const);
      const env = await ask('forge_remove', { name, ...(scope ? { scope } : {}) });
      if (env.ok)
        expect(env.data, `client ${i}.${lane}: remove of ${name}`).toMatchObject({ name, removed: true, ...(scope ? { scope } : {}) });
      answers.push({ client: i, session, op: 'remove', name, asked: name, env });
    } else {
      // A read while the others write: each name at most once per scope.
      const env = await ask('forge_list', {});
      const tools = (env.data as { tools: { name: string; scope: string; damaged?: boolean }[] }).tools;
      const rows = tools.map((t) => `${t.scope}:${t.name}`);
      expect(rows.length, `client ${i}.${lane}: forge_list lists a tool twice: ${rows.join(', ')}`).toBe(new Set(rows).size);
      expect(
        tools.filter((t) => t.damaged),
        `client ${i}.${lane}: a tool file read half-written`,
      ).toEqual([]);
    }
  }
}

describe('four forge serve processes on one project and one home', () => {
  it(
    'forge, call, promote and remove the same names at once: every answer an envelope, each audited once, the registry as the log says, no lock or temp file left',
    async () => {
      console.log(`contention: seed ${SEED} (FORGE_CONTENTION_SEED=${SEED} replays each client's choices), ${DURATION_MS} ms`);
      const s = scratch('forge-contention-');
      // The default breakers (50 forges a session, 60 calls a tool a minute) would refuse most of
      // what four busy agents do in two minutes: this test is about the races, not the breakers.
      s.file('.forge/policy.json', JSON.stringify({ breakers: { per_session_forge_count: 1_000_000, per_tool_rpm: 1_000_000 } }));
      const sessions = Array.from({ length: CLIENTS }, (_, i) => `contention-${i}`);
      const clients = await Promise.all(sessions.map((session) => connect(s, { env: { FORGE_SESSION_ID: session } })));
      const children = clients.map((c) => (c.transport as unknown as { _process?: ChildProcess })._process);
      if (children.some((ch) => !ch?.pid))
        throw new Error('the SDK stdio transport no longer exposes its child process (_process): update this test');
      const pids = children.map((ch) => ch?.pid as number);

      const answers: Answer[] = [];
      const deadline = Date.now() + DURATION_MS;
      await Promise.all(
        clients.flatMap((c, i) =>
          Array.from({ length: IN_FLIGHT }, (_, lane) => agent(i, lane, c, sessions[i] as string, deadline, answers)),
        ),
      );

      // The four stop as an agent's client does: stdin closed, each exits 0 on its own.
      const exits = await Promise.all(
        children.map((ch, i) => {
          const exited = exitOf(ch as ChildProcess);
          ch?.stdin?.end();
          return Promise.race([
            exited,
            new Promise<never>((_, reject) =>
              setTimeout(
                () =>
                  reject(
                    new Error(`forge serve ${i} did not exit within ${scaled(60_000)} ms of its stdin closing: ${clients[i]?.stderr()}`),
                  ),
                scaled(60_000),
              ).unref(),
            ),
          ]);
        }),
      );
      expect(exits, clients.map((c) => c.stderr()).join('\n')).toEqual(Array(CLIENTS).fill({ code: 0, signal: null }));
      await Promise.all(clients.map((c) => c.client.close()));

      const summary: Record<string, number> = {};
      for (const a of answers) {
        const outcome = a.op === 'promote' && a.env.ok ? ` ${(a.env.data as { outcome: string }).outcome}` : '';
        const k = `${a.op} ${a.env.ok ? 'ok' : a.env.error?.kind}${outcome}`;
        summary[k] = (summary[k] ?? 0) + 1;
      }
      console.log(`contention: ${answers.length} answers: ${JSON.stringify(summary, Object.keys(summary).sort())}`);
      // Every kind of operation went through at least once, or the run proved little.
      for (const op of ['forge', 'call', 'promote', 'remove'])
        expect(
          answers.some((a) => a.op === op && a.env.ok),
          `no ${op} succeeded`,
        ).toBe(true);

      // The log: one entry per answer, nothing more, nothing less.
      const log: AuditEntry[] = readFileSync(join(s.home, 'audit', 'forge.log'), 'utf8')
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as AuditEntry);
      const types: Record<string, number> = {};
      for (const e of log) types[e.type] = (types[e.type] ?? 0) + 1;
      console.log(`contention: ${log.length} audit entries: ${JSON.stringify(types)}`);
      expect(Object.keys(types).filter((t) => !EXPECTED_TYPES.has(t))).toEqual([]);
      const ours = log.filter((e) => sessions.includes(e.data.session as string));
      const told = answers.map(expectedEntry);
      const logged = ours.map(loggedEntry).filter((k): k is string => k !== undefined);
      expect({ lost: unmatched(told, logged), doubled: unmatched(logged, told) }).toEqual({ lost: [], doubled: [] });

      // Every call was answered by the tool its entry names (digest → the token of the forge that made it).
      const tokenOf = new Map<string, string>();
      for (const a of answers) if (a.op === 'forge' && a.env.ok) tokenOf.set((a.env.data as { digest: string }).digest, a.token as string);
      const calledBy = new Map(ours.filter((e) => e.type === 'forge.called' && e.data.ok === true).map((e) => [e.data.run_id, e.data]));
      for (const a of answers.filter((a) => a.op === 'call' && a.env.ok)) {
        const entry = calledBy.get(a.env.meta?.run_id);
        expect((a.env.data as { token: string }).token, `run ${String(a.env.meta?.run_id)}: ${JSON.stringify(entry)}`).toBe(
          tokenOf.get(entry?.digest as string),
        );
      }

      // Each call that ran left its run manifest, under the run id it answered with.
      const runsDir = join(s.project, '.forge', 'runs');
      const manifests = readdirSync(runsDir, { withFileTypes: true })
        .filter((d) => d.isDirectory())
        .map((d) => JSON.parse(readFileSync(join(runsDir, d.name, 'run_manifest.json'), 'utf8')) as { run_id: string });
      const ran = answers.filter((a) => a.op === 'call' && typeof a.env.meta?.run_id === 'string').map((a) => a.env.meta?.run_id);
      expect(manifests.map((m) => m.run_id).sort()).toEqual(ran.sort());

      // The registry is what the log says: per scope and name, the highest version written is live
      // unless its removal is logged, and every version written is kept (live or in .versions/).
      const written = new Map<string, Map<number, string>>();
      const removed = new Map<string, Set<number>>();
      for (const { type, data: d } of ours) {
        if (d.ok !== true) continue;
        const scope = type === 'forge.promoted' ? 'user' : (d.scope as string);
        const key = `${scope} ${d.name as string}`;
        const version = d.version as number;
        if (type === 'forge.created' || (type === 'forge.promoted' && d.outcome !== 'unchanged')) {
          const versions = written.get(key) ?? new Map<number, string>();
          written.set(key, versions);
          expect(versions.has(version), `${key} v${version} was written twice`).toBe(false);
          versions.set(version, d.digest as string);
        } else if (type === 'forge.removed') {
          const versions = removed.get(key) ?? new Set<number>();
          removed.set(key, versions);
          expect(versions.has(version), `${key} v${version} was removed twice`).toBe(false);
          versions.add(version);
        }
      }
      const expected: Record<'project' | 'user', Record<string, { version: number; digest: string }>> = { project: {}, user: {} };
      for (const [key, versions] of written) {
        const [scope, name] = key.split(' ') as ['project' | 'user', string];
        const top = Math.max(...versions.keys());
        for (const v of removed.get(key) ?? []) expect(versions.has(v), `${key} v${v} removed but never written`).toBe(true);
        if (!removed.get(key)?.has(top)) expected[scope][name] = { version: top, digest: versions.get(top) as string };
      }
      const roots = { project: join(s.project, '.forge', 'tools'), user: join(s.home, 'tools') };
      for (const scope of ['project', 'user'] as const) {
        const { live, kept } = storedTools(roots[scope]);
        expect(Object.fromEntries(live), `${scope} scope on disk`).toEqual(expected[scope]);
        for (const [key, versions] of written) {
          if (!key.startsWith(`${scope} `)) continue;
          const name = key.slice(scope.length + 1);
          const onDisk = [...(kept.get(name) ?? []), ...(live.has(name) ? [live.get(name)?.version as number] : [])];
          expect(
            onDisk.sort((x, y) => x - y),
            `${key}: the versions kept`,
          ).toEqual([...versions.keys()].sort((x, y) => x - y));
        }
      }

      // Nothing left behind by the four: no lock (registry .locks/, the audit log's lock), no temp file, no sandbox directory.
      expect(leftovers(s.root)).toEqual([]);
      expect(readdirSync(tmpdir()).filter((n) => n.startsWith('forge-') && pids.some((p) => n.includes(`-${p}-`)))).toEqual([]);

      // A fresh CLI process sees the same registry, each name once per scope, and every tool answers.
      const elsewhere = s.otherProject('elsewhere');
      const cli = async (args: string[], cwd = s.project) => {
        const r = await runCli([...args, '--json'], { cwd, env: s.env, timeoutMs: 120_000 });
        expect(r.code, `forge ${args.join(' ')}: ${r.stdout}${r.stderr}`).toBe(0);
        return JSON.parse(r.stdout) as unknown;
      };
      const rows = (await cli(['tools', 'list'])) as { name: string; scope: string; damaged?: boolean }[];
      expect(rows.map((t) => t.name).sort()).toEqual([...new Set(rows.map((t) => t.name))].sort());
      expect(rows.filter((t) => t.damaged)).toEqual([]);
      for (const scope of ['project', 'user'] as const) {
        const listed = (await cli(['tools', 'list', '--scope', scope])) as { name: string; version: number; digest: string }[];
        expect(listed.map((t) => t.name).sort()).toEqual([...new Set(listed.map((t) => t.name))].sort());
        expect(Object.fromEntries(listed.map((t) => [t.name, { version: t.version, digest: t.digest }]))).toEqual(expected[scope]);
        // A user tool is called from another project, where no project tool hides it.
        for (const [name, { digest }] of Object.entries(expected[scope])) {
          const env = (await cli(['tools', 'call', name, '{}'], scope === 'user' ? elsewhere : s.project)) as Envelope;
          expect(env, `${scope} ${name}`).toMatchObject({ ok: true, data: { name, token: tokenOf.get(digest) } });
        }
      }

      const verified = await runCli(['audit', 'verify', '--json'], { cwd: s.project, env: s.env, timeoutMs: 120_000 });
      expect(verified.code, verified.stdout + verified.stderr).toBe(0);
      expect(JSON.parse(verified.stdout)).toMatchObject({ ok: true });
      expect(leftovers(s.root)).toEqual([]);
    },
    DURATION_MS + 300_000,
  );
});
