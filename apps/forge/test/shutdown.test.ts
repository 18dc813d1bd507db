import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Readable, Stream } from 'node:stream';
import { scaled, waitFor } from '@forge/test-utils';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { CLI, connect, type Envelope, py, requireCliAndSandbox, runCli, type Scratch, scratch } from './helpers.js';

beforeAll(requireCliAndSandbox);

const CALLS = 8;
const GRACE_MS = 1000;
/** A tool that sleeps 5 s: far past the grace period. */
// Sleeps far past any wait here: a call answered `cancelled` (not "woke", not a timeout) was ended by
// the grace period, with no clock to read.
const SLEEPER = py('sleeper', 'import time\ntime.sleep(600)\nprint(json.dumps({"ok": True, "data": "woke"}))', {
  meta: { timeout_ms: 60_000 },
});

/** What a caller got: the tool result's envelope, or the error the client threw (a transport error). */
type Outcome = { result: CallToolResult; env: Envelope } | { thrown: string };

function settle(p: Promise<unknown>): Promise<Outcome> {
  return p.then(
    (r) => {
      const result = r as CallToolResult;
      const first = result.content[0];
      return { result, env: JSON.parse(first?.type === 'text' ? first.text : 'null') as Envelope };
    },
    (err: unknown) => ({ thrown: String(err) }),
  );
}

/**
 * Resolves to true once `stderr` carried `text`, or false after `ms`: the call sent next must
 * come after forge saw the signal, and a build that never says so still gets its calls checked.
 */
function stderrSays(stderr: Readable | Stream | null, text: string, ms = scaled(1000)): Promise<boolean> {
  let err = '';
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(false), ms);
    stderr?.on('data', (d: Buffer) => {
      err += d.toString();
      if (err.includes(text)) {
        clearTimeout(t);
        resolve(true);
      }
    });
  });
}

/** Resolves once `n` runs of the project have started (each run makes its directory before the sandbox starts). */
async function runsStarted(s: Scratch, n: number): Promise<void> {
  const dir = join(s.project, '.forge', 'runs');
  const count = () => {
    try {
      return readdirSync(dir).filter((d) => !d.endsWith('.jsonl')).length;
    } catch {
      return 0;
    }
  };
  await waitFor(
    () => `${n} runs to start in ${dir} (${count()} did)`,
    () => count() >= n,
    { timeoutMs: 15_000 },
  );
}

const auditEntries = (s: Scratch): { type: string; data: Record<string, unknown> }[] =>
  readFileSync(join(s.home, 'audit', 'forge.log'), 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as { type: string; data: Record<string, unknown> });

const exitOf = (child: ChildProcess) =>
  new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => {
    if (child.exitCode !== null || child.signalCode !== null) r({ code: child.exitCode, signal: child.signalCode });
    else child.once('exit', (code, signal) => r({ code, signal }));
  });

/**
 * What every shutdown must leave: each call in flight answered `cancelled` (a tool result, not a
 * transport error) naming the signal, the grace period and the kill; the late call refused with
 * `cancelled` before it ran; all of them audited, and the log intact.
 */
async function expectAnsweredAndAudited(s: Scratch, signal: string, inFlight: Outcome[], late: Outcome): Promise<void> {
  const killed = `forge is shutting down (${signal}) and the grace period of ${GRACE_MS} ms ended; the tool was killed`;
  expect(inFlight.map((o) => ('thrown' in o ? o.thrown : o.env.error?.kind))).toEqual(Array(CALLS).fill('cancelled'));
  for (const o of inFlight) {
    if ('thrown' in o) continue;
    expect(o.result.isError).toBe(true);
    expect(o.env).toMatchObject({ ok: false, error: { kind: 'cancelled', message: killed } });
  }
  if ('thrown' in late) throw new Error(`the call sent after ${signal} got a transport error, not the shutdown refusal: ${late.thrown}`);
  expect(late.result.isError).toBe(true);
  expect(late.env.error).toEqual({
    kind: 'cancelled',
    message: `forge is shutting down (${signal}) and takes no new calls (call again once it is back); the tool did not run`,
  });

  const called = auditEntries(s).filter((e) => e.type === 'forge.called');
  const runIds = inFlight.map((o) => ('env' in o ? o.env.meta?.run_id : undefined));
  const killedEntries = called.filter((e) => e.data.run_id !== null && e.data.run_id !== undefined);
  expect(killedEntries).toHaveLength(CALLS);
  for (const e of killedEntries) expect(e.data).toMatchObject({ ok: false, name: 'sleeper', kind: 'cancelled', exit: 'signal' });
  expect(killedEntries.map((e) => e.data.run_id).sort()).toEqual([...runIds].sort());
  const refused = called.filter((e) => e.data.run_id === null || e.data.run_id === undefined);
  expect(refused.map((e) => e.data)).toEqual([
    expect.objectContaining({ ok: false, name: 'sleeper', kind: 'cancelled', message: late.env.error?.message }),
  ]);
  const verified = await runCli(['audit', 'verify', '--json'], { cwd: s.project, env: s.env });
  expect(verified.code, verified.stdout + verified.stderr).toBe(0);
  expect(JSON.parse(verified.stdout)).toMatchObject({ ok: true });
}

describe.each(['SIGTERM', 'SIGINT'] as const)('forge serve stops on %s past the grace period', (signal) => {
  it(`stdio: every call in flight is answered cancelled and audited; a call after ${signal} is refused; exit 0`, async () => {
    const s = scratch();
    const c = await connect(s, { args: ['--grace-ms', String(GRACE_MS)] });
    expect((await c.call('forge_tool', SLEEPER)).result.isError).toBe(false);
    const calls = Array.from({ length: CALLS }, () =>
      settle(c.client.callTool({ name: 'sleeper', arguments: {} }, undefined, { timeout: scaled(60_000) })),
    );
    await runsStarted(s, CALLS);
    // The SDK's stdio transport keeps its child private; its exit status is only there.
    const child = (c.transport as unknown as { _process?: ChildProcess })._process;
    if (!child?.pid) throw new Error('the SDK stdio transport no longer exposes its child process (_process): update this test');
    const exit = exitOf(child);
    const noted = stderrSays(c.transport.stderr, `forge: ${signal}: shutting down`);
    child.kill(signal);
    await noted;
    const late = await settle(c.client.callTool({ name: 'sleeper', arguments: {} }));
    const inFlight = await Promise.all(calls);
    expect(await exit).toEqual({ code: 0, signal: null });
    // The tools were killed once the grace period ended, not left to finish: each answered cancelled.
    await expectAnsweredAndAudited(s, signal, inFlight, late);
    expect(await noted, `forge serve said nothing on stderr about ${signal}`).toBe(true);
  });

  it(`HTTP: every call in flight is answered cancelled and audited; a call after ${signal} is refused, a new session gets 503; exit 0`, async () => {
    const s = scratch();
    const child = spawn(process.execPath, [CLI, 'serve', '--http', '127.0.0.1:0', '--json', '--grace-ms', String(GRACE_MS)], {
      cwd: s.project,
      env: s.env,
    });
    onTestFinished(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    const exit = exitOf(child);
    const url = await new Promise<URL>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        const line = out.split('\n')[0];
        if (out.includes('\n') && line) resolve(new URL((JSON.parse(line) as { url: string }).url));
      });
      void exit.then((e) => reject(new Error(`forge serve --http exited ${JSON.stringify(e)} before listening`)));
    });
    const client = new Client({ name: 'forge-shutdown-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(url));
    onTestFinished(() => client.close().catch(() => {}));
    expect(((await settle(client.callTool({ name: 'forge_tool', arguments: SLEEPER }))) as { result: CallToolResult }).result.isError).toBe(
      false,
    );
    const calls = Array.from({ length: CALLS }, () =>
      settle(client.callTool({ name: 'sleeper', arguments: {} }, undefined, { timeout: scaled(60_000) })),
    );
    await runsStarted(s, CALLS);
    const noted = stderrSays(child.stderr, `forge: ${signal}: shutting down`);
    child.kill(signal);
    await noted;
    const late = await settle(client.callTool({ name: 'sleeper', arguments: {} }));
    // A new session is turned away with an answer, not a refused connection.
    const fresh = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'late', version: '1' } },
      }),
    }).then(
      async (r) => ({ status: r.status, message: ((await r.json()) as { error?: { message?: string } }).error?.message }),
      (err: Error) => ({ status: 0, message: String(err.cause ?? err) }),
    );
    const inFlight = await Promise.all(calls);
    expect(await exit).toEqual({ code: 0, signal: null });
    await expectAnsweredAndAudited(s, signal, inFlight, late);
    expect(fresh).toEqual({
      status: 503,
      message: 'the forge server is shutting down: it opens no new sessions; try again once it is back',
    });
    expect(await noted, `forge serve said nothing on stderr about ${signal}`).toBe(true);
  });
});
