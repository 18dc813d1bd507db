import { execFile } from 'node:child_process';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { probe } from '@forge/sandbox';
import { CSV_STATS, FIB } from './demo-tools.js';
import { type DemoStep, DemoTour, expect, type StepLine, Unexpected } from './demo-tour.js';
import { clip, ms, type Output } from './output.js';

export type { DemoStep } from './demo-tour.js';

const run = promisify(execFile);

export interface DemoReport {
  ok: boolean;
  ms: number;
  steps: DemoStep[];
  /** Why the tour stopped, when it did. */
  error?: string;
}

/** A step of the tour: what it shows, and the work that shows it. */
interface TourStep {
  title: string;
  proves: string;
  run(t: DemoTour, line: StepLine): Promise<void>;
}

/** The tour, in order: each step relies on what the ones before it did. */
const TOUR: readonly TourStep[] = [
  {
    title: 'Start the MCP server',
    proves: 'forge serve runs as a child process; the official MCP SDK client talks to it over stdio.',
    run: startServer,
  },
  {
    title: 'Forge a tool at runtime',
    proves: `The agent sends a name, a JSON Schema and ${FIB.impl.trim().split('\n').length} lines of Python; forge validates and stores it, then tells the client its tool list changed.`,
    run: forgeFib,
  },
  {
    title: 'Call it: cold, then from the cache',
    proves:
      'A call runs in a fresh bubblewrap sandbox (no network, read-only system, only what the schema names). fib is deterministic, so the same input is answered from the cache.',
    run: callColdThenCached,
  },
  {
    title: 'The schema is enforced before anything runs',
    proves: 'Input that does not match input_schema is refused with the JSON pointer of the problem; no process starts.',
    run: refuseBadInput,
  },
  {
    title: 'Policy is live',
    proves:
      'An operator edits the workspace policy while the server runs: new forges and existing tools are both checked against it at the next call, no restart.',
    run: editPolicyLive,
  },
  {
    title: 'The sandbox sees only what the schema names',
    proves: 'csv_stats marks its "path" input "x-bind": "ro": that one file is mounted read-only, after checks; any other path is refused.',
    run: bindOneFile,
  },
  {
    title: 'Stop the server',
    proves: 'Closing stdin (EOF) stops the server: calls in flight finish, the audit log is flushed, exit code 0.',
    run: stopServer,
  },
  {
    title: 'Everything above is in the audit log',
    proves:
      'Each forge, call and refusal appended one hash-chained entry. `forge audit verify` walks the chain; a one-byte edit to a copy is caught at the entry that was changed.',
    run: verifyAndTamper,
  },
];

/**
 * The guided tour: starts `forge serve` (this CLI, `cliPath`) as a child in a temporary home and
 * project, drives it with the MCP SDK client over stdio, and checks every outcome it shows:
 * forge → list_changed → call (cold, then cached), a schema refusal, a policy edit forbidding
 * names while the server runs, an `x-bind` file read and a path refused, a clean EOF shutdown,
 * then the audit log verified, a copy tampered with and the change caught. Removes its
 * directories whatever happens.
 */
export async function runDemo(o: { cliPath: string; out: Output; env?: NodeJS.ProcessEnv }): Promise<DemoReport> {
  const started = performance.now();
  const tour = new DemoTour(o.cliPath, o.out, o.env ?? process.env);
  const s = tour.style;
  try {
    tour.say(s.bold('forge demo') + s.dim(' — an agent forges a tool at runtime; every call is schema-checked, sandboxed and audited.'));
    tour.say(s.dim(`Scratch home ${tour.home} and project ${tour.project}, removed at the end.`));
    await requireSandbox();
    for (const step of TOUR) await tour.step(step.title, step.proves, (line) => step.run(tour, line));
    const total = performance.now() - started;
    tour.say();
    tour.say(`${s.green('Done')} in ${ms(total)}: ${tour.steps.length} steps, all as expected. Scratch directories removed.`);
    tour.say(`Next: ${s.bold('forge doctor')} checks this host; the README shows how to connect Claude Code or another MCP client.`);
    return { ok: true, ms: total, steps: tour.steps };
  } catch (err) {
    const message =
      err instanceof Unexpected
        ? err.message
        : `${(err as Error).message}${tour.serverLog ? `\nforge serve's stderr:\n${tour.serverLog.trim()}` : ''}`;
    tour.say();
    tour.say(`${s.red('✗ the demo stopped:')} ${message}`);
    return { ok: false, ms: performance.now() - started, steps: tour.steps, error: message };
  } finally {
    await tour.close();
  }
}

/** forge never runs a tool without a sandbox: the tour stops before its first step on a host that cannot make one. */
async function requireSandbox(): Promise<void> {
  const host = await probe();
  if (!host.ok) {
    throw new Unexpected(
      `this host cannot sandbox, and forge never runs a tool without one: ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')} — run \`forge doctor\` for details`,
    );
  }
}

async function startServer(t: DemoTour, line: StepLine): Promise<void> {
  const s = t.style;
  const started = performance.now();
  const client = await t.connect();
  const ready = performance.now() - started;
  const { tools } = await client.listTools();
  const info = client.getServerVersion();
  line(`${s.green('✓')} ${info?.name} ${info?.version} ready in ${ms(ready)} (spawn, start, MCP handshake)`);
  line(`${s.green('✓')} tools/list: ${tools.map((x) => x.name).join(', ')} — the meta-tools an agent forges and calls with`);
  expect(
    tools.some((x) => x.name === 'forge_tool'),
    'tools/list should hold forge_tool',
  );
}

async function forgeFib(t: DemoTour, line: StepLine): Promise<void> {
  const s = t.style;
  const notified = t.nextListChanged();
  const { env: e, ms: took } = await t.call('forge_tool', FIB);
  expect(e.ok, `forge_tool fib was refused: ${e.error?.kind}: ${e.error?.message}`);
  const d = e.data as { name: string; version: number; scope: string; digest: string };
  line(
    `${s.green('✓')} forge_tool ${s.bold('fib')} (python3, input {n: integer 0…10000}) → v${d.version} in the ${d.scope} scope ${s.dim(`(${ms(took)}, ${d.digest.slice(0, 19)}…)`)}`,
  );
  expect(await notified, 'the server should send notifications/tools/list_changed after a forge');
  const { tools } = await t.client.listTools();
  const fib = tools.find((x) => x.name === 'fib');
  expect(fib, 'fib should be in tools/list after list_changed');
  line(
    `${s.green('✓')} notifications/tools/list_changed arrived; tools/list now has ${s.bold('fib')} with its inputSchema${fib?.outputSchema ? ' and outputSchema' : ''}`,
  );
}

async function callColdThenCached(t: DemoTour, line: StepLine): Promise<void> {
  const s = t.style;
  const cold = await t.call('fib', { n: 90 });
  expect(cold.env.ok, `fib {n: 90} failed: ${cold.env.error?.kind}: ${cold.env.error?.message}`);
  const value = (cold.env.data as { fib: string }).fib;
  line(
    `${s.green('✓')} fib {n: 90} → ${s.bold(value)}  ${ms(cold.ms)} ${s.dim(`(cache ${cold.env.meta?.cache}: sandbox started, python ran, envelope checked against output_schema)`)}`,
  );
  const hit = await t.call('fib', { n: 90 });
  expect(hit.env.ok && hit.env.meta?.cache === 'hit', `the second fib {n: 90} should be a cache hit (got ${JSON.stringify(hit.env.meta)})`);
  line(
    `${s.green('✓')} fib {n: 90} → ${s.bold((hit.env.data as { fib: string }).fib)}  ${ms(hit.ms)} ${s.dim(`(cache hit: nothing ran; ${(cold.ms / hit.ms).toFixed(0)}× faster, still audited)`)}`,
  );
}

async function refuseBadInput(t: DemoTour, line: StepLine): Promise<void> {
  for (const input of [{ n: -5 }, { n: 'ten' }, { n: 10, extra: true }]) {
    const r = await t.call('fib', input);
    expect(
      !r.env.ok && r.env.error?.kind === 'validation_failed',
      `fib ${JSON.stringify(input)} should be validation_failed (got ${JSON.stringify(r.env.error ?? r.env.data)})`,
    );
    expect(r.result.isError === true, 'a refused call should be an MCP isError result');
    line(t.refusedLine(`fib ${JSON.stringify(input)}`, r.env, r.ms));
  }
}

async function editPolicyLive(t: DemoTour, line: StepLine): Promise<void> {
  const s = t.style;
  const policy = { forbidden_tool_names: ['deploy_*', 'fib'] };
  writeFileSync(join(t.project, '.forge', 'policy.json'), `${JSON.stringify(policy)}\n`);
  line(`${s.cyan('edit')} .forge/policy.json ← ${JSON.stringify(policy)}`);
  const deploy = await t.call('forge_tool', { ...FIB, name: 'deploy_prod', description: 'ships to production' });
  expect(
    !deploy.env.ok && deploy.env.error?.kind === 'name_forbidden',
    `forging deploy_prod should be name_forbidden (got ${JSON.stringify(deploy.env.error ?? deploy.env.data)})`,
  );
  line(t.refusedLine('forge_tool deploy_prod', deploy.env, deploy.ms));
  const fib = await t.call('fib', { n: 10 });
  expect(
    !fib.env.ok && fib.env.error?.kind === 'name_forbidden',
    `fib should now be name_forbidden (got ${JSON.stringify(fib.env.error ?? fib.env.data)})`,
  );
  line(t.refusedLine('fib {n: 10}, forged before the edit', fib.env, fib.ms));
}

async function bindOneFile(t: DemoTour, line: StepLine): Promise<void> {
  const s = t.style;
  const csv = join(t.project, 'sales.csv');
  writeFileSync(csv, 'region,amount\nnorth,120.5\nsouth,99\neast,130.25\nwest,n/a\ncentre,87\n');
  const made = await t.call('forge_tool', CSV_STATS);
  expect(made.env.ok, `forge_tool csv_stats was refused: ${made.env.error?.kind}: ${made.env.error?.message}`);
  line(`${s.green('✓')} forge_tool ${s.bold('csv_stats')} → v1 ${s.dim(`(${ms(made.ms)})`)}`);
  const r = await t.call('csv_stats', { path: csv, column: 'amount' });
  expect(r.env.ok, `csv_stats failed: ${r.env.error?.kind}: ${r.env.error?.message}`);
  const d = r.env.data as { count: number; mean: number; min: number; max: number; skipped: number };
  line(
    `${s.green('✓')} csv_stats {path: ${csv}, column: "amount"} → count ${d.count}, mean ${d.mean.toFixed(2)}, min ${d.min}, max ${d.max}, skipped ${d.skipped} ${s.dim(`(${ms(r.ms)})`)}`,
  );
  const denied = await t.call('csv_stats', { path: '/etc/passwd', column: 'x' });
  expect(
    !denied.env.ok && denied.env.error?.kind === 'bind_denied',
    `csv_stats on /etc/passwd should be bind_denied (got ${JSON.stringify(denied.env.error ?? denied.env.data)})`,
  );
  line(t.refusedLine('csv_stats {path: "/etc/passwd"}', denied.env, denied.ms));
}

async function stopServer(t: DemoTour, line: StepLine): Promise<void> {
  const s = t.style;
  const started = performance.now();
  const code = await t.disconnect();
  expect(code === 0 || code === undefined, `forge serve should exit 0 on EOF (got ${code}); its stderr: ${t.serverLog.trim()}`);
  line(`${s.green('✓')} forge serve exited ${code ?? 0} ${ms(performance.now() - started)} after EOF`);
}

/** `forge audit verify --json` of the log under `forgeHome`: its exit code (0 or 1) and report. */
async function verifyAudit(t: DemoTour, forgeHome: string) {
  try {
    const r = await run(process.execPath, [t.cliPath, 'audit', 'verify', '--json'], { env: { ...t.env, FORGE_HOME: forgeHome } });
    return { code: 0, r: JSON.parse(r.stdout) };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    if (e.code !== 1 || !e.stdout) throw new Unexpected(`forge audit verify failed to run: ${e.stderr ?? err}`);
    return { code: 1, r: JSON.parse(e.stdout) };
  }
}

async function verifyAndTamper(t: DemoTour, line: StepLine): Promise<void> {
  const s = t.style;
  const log = join(t.home, 'audit', 'forge.log');
  const entries = readFileSync(log, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { seq: number; type: string; data: Record<string, unknown> });
  const byType = new Map<string, number>();
  for (const e of entries) byType.set(e.type, (byType.get(e.type) ?? 0) + 1);
  const good = await verifyAudit(t, t.home);
  expect(good.code === 0 && good.r.ok, `the audit log should verify: ${JSON.stringify(good.r.first_bad)}`);
  line(
    `${s.green('✓')} forge audit verify → ${good.r.entries} entries intact ${s.dim(`(${[...byType].map(([k, v]) => `${k} ×${v}`).join(', ')})`)}`,
  );

  // Tamper with a copy: the first audited call of fib now claims to be of "fob".
  const copy = join(t.root, 'tampered');
  cpSync(t.home, copy, { recursive: true });
  const copyLog = join(copy, 'audit', 'forge.log');
  const lines = readFileSync(copyLog, 'utf8').split('\n');
  const i = lines.findIndex((l) => l.includes('"forge.called"') && l.includes('"fib"'));
  expect(i >= 0, 'the log should hold a forge.called entry for fib');
  lines[i] = (lines[i] as string).replace('"fib"', '"fob"');
  writeFileSync(copyLog, lines.join('\n'));
  line(`${s.cyan('edit')} a copy of the log: entry ${entries[i]?.seq} (forge.called) "fib" → "fob", one byte`);
  const bad = await verifyAudit(t, copy);
  const fb = bad.r.first_bad as { seq: number; reason: string; message: string } | undefined;
  expect(bad.code === 1 && fb?.seq === entries[i]?.seq, `verify should fail at entry ${entries[i]?.seq} (got ${JSON.stringify(bad.r)})`);
  line(
    `${s.red('✗')} forge audit verify (the copy) → exit 1 at entry ${fb?.seq}: ${s.red(fb?.reason ?? '')} ${s.dim(`(${clip((fb?.message ?? '').replace(/^[^—]*— /, ''), 80)})`)}`,
  );
}
