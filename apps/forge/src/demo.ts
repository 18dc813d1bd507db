import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { probe } from '@forge/sandbox';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { type CallToolResult, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { CSV_STATS, FIB } from './demo-tools.js';
import { clip, ms, type Output, unstyled } from './output.js';

const run = promisify(execFile);

/** One numbered step of the tour, as `--json` reports it. */
export interface DemoStep {
  n: number;
  title: string;
  /** What the step shows about forge. */
  proves: string;
  ok: boolean;
  ms: number;
  lines: string[];
}

export interface DemoReport {
  ok: boolean;
  ms: number;
  steps: DemoStep[];
  /** Why the tour stopped, when it did. */
  error?: string;
}

/** A step's outcome was not what the tour expects: forge (or the host) is not working as documented. */
class Unexpected extends Error {}

interface Envelope {
  ok: boolean;
  data?: unknown;
  error?: { kind: string; message: string };
  meta?: { cache?: string; duration_ms?: number; run_id?: string };
}

/** Environment variables of the caller that would change what the demo shows: the demo sets its own. */
const FORGE_VARS = ['FORGE_HOME', 'FORGE_PERSONA', 'FORGE_ALLOWED_TOOLS', 'FORGE_SESSION_ID', 'FORGE_TASK_ID', 'FORGE_SECRET_VAULT'];

/**
 * The guided tour: starts `forge serve` (this CLI, `cliPath`) as a child in a temporary home and
 * project, drives it with the MCP SDK client over stdio, and checks every outcome it shows:
 * forge → list_changed → call (cold, then cached), a schema refusal, a policy edit forbidding
 * names while the server runs, an `x-bind` file read and a path refused, a clean EOF shutdown,
 * then the audit log verified, a copy tampered with and the change caught. Removes its
 * directories whatever happens.
 */
export async function runDemo(o: { cliPath: string; out: Output; env?: NodeJS.ProcessEnv }): Promise<DemoReport> {
  const { out } = o;
  const s = out.style;
  const human = !out.json;
  const say = (text = '') => human && out.line(text);
  const started = performance.now();
  const steps: DemoStep[] = [];
  const root = mkdtempSync(join(tmpdir(), 'forge-demo-'));
  const home = join(root, 'home');
  const project = join(root, 'project');
  mkdirSync(home, { mode: 0o700 });
  mkdirSync(join(project, '.forge'), { recursive: true, mode: 0o700 });
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(o.env ?? process.env)) if (v !== undefined && !FORGE_VARS.includes(k)) env[k] = v;
  env.FORGE_HOME = home;
  env.NO_COLOR = '1';

  let transport: StdioClientTransport | undefined;
  let client: Client | undefined;
  let serverLog = '';

  /** Runs one step; its lines print as they come and are kept for --json. */
  const step = async (title: string, proves: string, body: (line: (text: string) => void) => Promise<void>) => {
    const rec: DemoStep = { n: steps.length + 1, title, proves, ok: false, ms: 0, lines: [] };
    steps.push(rec);
    say();
    say(`${s.bold(`${rec.n}. ${title}`)}`);
    say(`   ${s.dim(proves)}`);
    const t = performance.now();
    try {
      await body((text) => {
        rec.lines.push(unstyled(text));
        say(`   ${text}`);
      });
      rec.ok = true;
    } finally {
      rec.ms = performance.now() - t;
    }
  };
  const expect = (cond: unknown, what: string): void => {
    if (!cond) throw new Unexpected(what);
  };

  // What the MCP client does, timed.
  const call = async (name: string, args: Record<string, unknown>): Promise<{ env: Envelope; ms: number; result: CallToolResult }> => {
    if (!client) throw new Unexpected('no client');
    const t = performance.now();
    const result = (await client.callTool({ name, arguments: args })) as CallToolResult;
    const took = performance.now() - t;
    const first = result.content[0];
    const env = JSON.parse(first?.type === 'text' ? first.text : '{}') as Envelope;
    return { env, ms: took, result };
  };
  const refusedLine = (what: string, e: Envelope, took: number) =>
    `${s.red('✗')} ${what} → ${s.red(e.error?.kind ?? '?')}: ${clip(e.error?.message ?? '', 150)} ${s.dim(`(${ms(took)})`)}`;

  let changed: (() => void) | undefined;
  const nextListChanged = (timeoutMs = 5000) =>
    new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      changed = () => {
        clearTimeout(timer);
        resolve(true);
      };
    });

  try {
    say(s.bold('forge demo') + s.dim(' — an agent forges a tool at runtime; every call is schema-checked, sandboxed and audited.'));
    say(s.dim(`Scratch home ${home} and project ${project}, removed at the end.`));

    const host = await probe();
    if (!host.ok) {
      throw new Unexpected(
        `this host cannot sandbox, and forge never runs a tool without one: ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')} — run \`forge doctor\` for details`,
      );
    }

    await step(
      'Start the MCP server',
      'forge serve runs as a child process; the official MCP SDK client talks to it over stdio.',
      async (line) => {
        const t = performance.now();
        transport = new StdioClientTransport({ command: process.execPath, args: [o.cliPath, 'serve'], cwd: project, env, stderr: 'pipe' });
        transport.stderr?.on('data', (d: Buffer) => (serverLog += d.toString()));
        client = new Client({ name: 'forge-demo', version: '1.0.0' });
        client.setNotificationHandler(ToolListChangedNotificationSchema, async () => changed?.());
        await client.connect(transport);
        const ready = performance.now() - t;
        const { tools } = await client.listTools();
        const info = client.getServerVersion();
        line(`${s.green('✓')} ${info?.name} ${info?.version} ready in ${ms(ready)} (spawn, start, MCP handshake)`);
        line(`${s.green('✓')} tools/list: ${tools.map((x) => x.name).join(', ')} — the meta-tools an agent forges and calls with`);
        expect(
          tools.some((x) => x.name === 'forge_tool'),
          'tools/list should hold forge_tool',
        );
      },
    );

    await step(
      'Forge a tool at runtime',
      `The agent sends a name, a JSON Schema and ${FIB.impl.trim().split('\n').length} lines of Python; forge validates and stores it, then tells the client its tool list changed.`,
      async (line) => {
        const notified = nextListChanged();
        const { env: e, ms: took } = await call('forge_tool', FIB);
        expect(e.ok, `forge_tool fib was refused: ${e.error?.kind}: ${e.error?.message}`);
        const d = e.data as { name: string; version: number; scope: string; digest: string };
        line(
          `${s.green('✓')} forge_tool ${s.bold('fib')} (python3, input {n: integer 0…10000}) → v${d.version} in the ${d.scope} scope ${s.dim(`(${ms(took)}, ${d.digest.slice(0, 19)}…)`)}`,
        );
        expect(await notified, 'the server should send notifications/tools/list_changed after a forge');
        const { tools } = await (client as Client).listTools();
        const fib = tools.find((x) => x.name === 'fib');
        expect(fib, 'fib should be in tools/list after list_changed');
        line(
          `${s.green('✓')} notifications/tools/list_changed arrived; tools/list now has ${s.bold('fib')} with its inputSchema${fib?.outputSchema ? ' and outputSchema' : ''}`,
        );
      },
    );

    await step(
      'Call it: cold, then from the cache',
      'A call runs in a fresh bubblewrap sandbox (no network, read-only system, only what the schema names). fib is deterministic, so the same input is answered from the cache.',
      async (line) => {
        const cold = await call('fib', { n: 90 });
        expect(cold.env.ok, `fib {n: 90} failed: ${cold.env.error?.kind}: ${cold.env.error?.message}`);
        const value = (cold.env.data as { fib: string }).fib;
        line(
          `${s.green('✓')} fib {n: 90} → ${s.bold(value)}  ${ms(cold.ms)} ${s.dim(`(cache ${cold.env.meta?.cache}: sandbox started, python ran, envelope checked against output_schema)`)}`,
        );
        const hit = await call('fib', { n: 90 });
        expect(
          hit.env.ok && hit.env.meta?.cache === 'hit',
          `the second fib {n: 90} should be a cache hit (got ${JSON.stringify(hit.env.meta)})`,
        );
        line(
          `${s.green('✓')} fib {n: 90} → ${s.bold((hit.env.data as { fib: string }).fib)}  ${ms(hit.ms)} ${s.dim(`(cache hit: nothing ran; ${(cold.ms / hit.ms).toFixed(0)}× faster, still audited)`)}`,
        );
      },
    );

    await step(
      'The schema is enforced before anything runs',
      'Input that does not match input_schema is refused with the JSON pointer of the problem; no process starts.',
      async (line) => {
        for (const input of [{ n: -5 }, { n: 'ten' }, { n: 10, extra: true }]) {
          const r = await call('fib', input);
          expect(
            !r.env.ok && r.env.error?.kind === 'validation_failed',
            `fib ${JSON.stringify(input)} should be validation_failed (got ${JSON.stringify(r.env.error ?? r.env.data)})`,
          );
          expect(r.result.isError === true, 'a refused call should be an MCP isError result');
          line(refusedLine(`fib ${JSON.stringify(input)}`, r.env, r.ms));
        }
      },
    );

    await step(
      'Policy is live',
      'An operator edits the workspace policy while the server runs: new forges and existing tools are both checked against it at the next call, no restart.',
      async (line) => {
        const policy = { forbidden_tool_names: ['deploy_*', 'fib'] };
        writeFileSync(join(project, '.forge', 'policy.json'), `${JSON.stringify(policy)}\n`);
        line(`${s.cyan('edit')} .forge/policy.json ← ${JSON.stringify(policy)}`);
        const deploy = await call('forge_tool', { ...FIB, name: 'deploy_prod', description: 'ships to production' });
        expect(
          !deploy.env.ok && deploy.env.error?.kind === 'name_forbidden',
          `forging deploy_prod should be name_forbidden (got ${JSON.stringify(deploy.env.error ?? deploy.env.data)})`,
        );
        line(refusedLine('forge_tool deploy_prod', deploy.env, deploy.ms));
        const fib = await call('fib', { n: 10 });
        expect(
          !fib.env.ok && fib.env.error?.kind === 'name_forbidden',
          `fib should now be name_forbidden (got ${JSON.stringify(fib.env.error ?? fib.env.data)})`,
        );
        line(refusedLine('fib {n: 10}, forged before the edit', fib.env, fib.ms));
      },
    );

    await step(
      'The sandbox sees only what the schema names',
      'csv_stats marks its "path" input "x-bind": "ro": that one file is mounted read-only, after checks; any other path is refused.',
      async (line) => {
        const csv = join(project, 'sales.csv');
        writeFileSync(csv, 'region,amount\nnorth,120.5\nsouth,99\neast,130.25\nwest,n/a\ncentre,87\n');
        const made = await call('forge_tool', CSV_STATS);
        expect(made.env.ok, `forge_tool csv_stats was refused: ${made.env.error?.kind}: ${made.env.error?.message}`);
        line(`${s.green('✓')} forge_tool ${s.bold('csv_stats')} → v1 ${s.dim(`(${ms(made.ms)})`)}`);
        const r = await call('csv_stats', { path: csv, column: 'amount' });
        expect(r.env.ok, `csv_stats failed: ${r.env.error?.kind}: ${r.env.error?.message}`);
        const d = r.env.data as { count: number; mean: number; min: number; max: number; skipped: number };
        line(
          `${s.green('✓')} csv_stats {path: ${csv}, column: "amount"} → count ${d.count}, mean ${d.mean.toFixed(2)}, min ${d.min}, max ${d.max}, skipped ${d.skipped} ${s.dim(`(${ms(r.ms)})`)}`,
        );
        const denied = await call('csv_stats', { path: '/etc/passwd', column: 'x' });
        expect(
          !denied.env.ok && denied.env.error?.kind === 'bind_denied',
          `csv_stats on /etc/passwd should be bind_denied (got ${JSON.stringify(denied.env.error ?? denied.env.data)})`,
        );
        line(refusedLine('csv_stats {path: "/etc/passwd"}', denied.env, denied.ms));
      },
    );

    await step(
      'Stop the server',
      'Closing stdin (EOF) stops the server: calls in flight finish, the audit log is flushed, exit code 0.',
      async (line) => {
        // The SDK transport keeps its child private; its exit code is what this step shows.
        const child = (transport as unknown as { _process?: { exitCode: number | null } })._process;
        const t = performance.now();
        await (client as Client).close();
        client = undefined;
        const code = child?.exitCode;
        expect(code === 0 || code === undefined, `forge serve should exit 0 on EOF (got ${code}); its stderr: ${serverLog.trim()}`);
        line(`${s.green('✓')} forge serve exited ${code ?? 0} ${ms(performance.now() - t)} after EOF`);
      },
    );

    await step(
      'Everything above is in the audit log',
      'Each forge, call and refusal appended one hash-chained entry. `forge audit verify` walks the chain; a one-byte edit to a copy is caught at the entry that was changed.',
      async (line) => {
        const verify = async (forgeHome: string) => {
          try {
            const r = await run(process.execPath, [o.cliPath, 'audit', 'verify', '--json'], { env: { ...env, FORGE_HOME: forgeHome } });
            return { code: 0, r: JSON.parse(r.stdout) };
          } catch (err) {
            const e = err as { code?: number; stdout?: string; stderr?: string };
            if (e.code !== 1 || !e.stdout) throw new Unexpected(`forge audit verify failed to run: ${e.stderr ?? err}`);
            return { code: 1, r: JSON.parse(e.stdout) };
          }
        };
        const log = join(home, 'audit', 'forge.log');
        const entries = readFileSync(log, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as { seq: number; type: string; data: Record<string, unknown> });
        const byType = new Map<string, number>();
        for (const e of entries) byType.set(e.type, (byType.get(e.type) ?? 0) + 1);
        const good = await verify(home);
        expect(good.code === 0 && good.r.ok, `the audit log should verify: ${JSON.stringify(good.r.first_bad)}`);
        line(
          `${s.green('✓')} forge audit verify → ${good.r.entries} entries intact ${s.dim(`(${[...byType].map(([k, v]) => `${k} ×${v}`).join(', ')})`)}`,
        );

        // Tamper with a copy: the first audited call of fib now claims to be of "fob".
        const copy = join(root, 'tampered');
        cpSync(home, copy, { recursive: true });
        const copyLog = join(copy, 'audit', 'forge.log');
        const lines = readFileSync(copyLog, 'utf8').split('\n');
        const i = lines.findIndex((l) => l.includes('"forge.called"') && l.includes('"fib"'));
        expect(i >= 0, 'the log should hold a forge.called entry for fib');
        lines[i] = (lines[i] as string).replace('"fib"', '"fob"');
        writeFileSync(copyLog, lines.join('\n'));
        line(`${s.cyan('edit')} a copy of the log: entry ${entries[i]?.seq} (forge.called) "fib" → "fob", one byte`);
        const bad = await verify(copy);
        const fb = bad.r.first_bad as { seq: number; reason: string; message: string } | undefined;
        expect(
          bad.code === 1 && fb?.seq === entries[i]?.seq,
          `verify should fail at entry ${entries[i]?.seq} (got ${JSON.stringify(bad.r)})`,
        );
        line(
          `${s.red('✗')} forge audit verify (the copy) → exit 1 at entry ${fb?.seq}: ${s.red(fb?.reason ?? '')} ${s.dim(`(${clip((fb?.message ?? '').replace(/^[^—]*— /, ''), 80)})`)}`,
        );
      },
    );

    const total = performance.now() - started;
    say();
    say(`${s.green('Done')} in ${ms(total)}: ${steps.length} steps, all as expected. Scratch directories removed.`);
    say(`Next: ${s.bold('forge doctor')} checks this host; the README shows how to connect Claude Code or another MCP client.`);
    return { ok: true, ms: total, steps };
  } catch (err) {
    const message =
      err instanceof Unexpected
        ? err.message
        : `${(err as Error).message}${serverLog ? `\nforge serve's stderr:\n${serverLog.trim()}` : ''}`;
    say();
    say(`${s.red('✗ the demo stopped:')} ${message}`);
    return { ok: false, ms: performance.now() - started, steps, error: message };
  } finally {
    await client?.close().catch(() => {});
    rmSync(root, { recursive: true, force: true });
  }
}
