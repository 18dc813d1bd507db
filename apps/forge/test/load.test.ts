import { scaled } from '@forge/test-utils';
/**
 * One `forge serve --http` under load, as a real process: a thousand calls at once in each
 * protocol era, a burst under a small open-files limit (`ulimit -n 256`), and two hundred
 * sessions listening for list changes. Each call is a run of its own (distinct inputs: the same
 * input would be one run, shared), so the bound on sandboxes running at once is what keeps the
 * process within its descriptors.
 */
import { Client as ModernClient, StreamableHTTPClientTransport as ModernTransport } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { type Envelope, requireCliAndSandbox, type Scratch, scratch, serveHttp } from './helpers.js';

beforeAll(requireCliAndSandbox);

/** A project whose breakers let a burst through (60 calls a tool a minute is the default). */
function busyProject(): Scratch {
  const s = scratch('forge-load-');
  s.file('.forge/policy.json', JSON.stringify({ breakers: { per_tool_rpm: 1_000_000 } }));
  return s;
}

/** A bash tool that answers with its input: cheap to start, so the load is forge's, not the interpreter's. */
const ECHO = {
  name: 'echo',
  description: 'answers with its input',
  runtime: 'bash',
  input_schema: { type: 'object' },
  impl: 'printf \'{"ok":true,"data":%s}\\n\' "$(cat)"\n',
};

const envelopeOf = (r: unknown): Envelope => JSON.parse((r as { content: { text: string }[] }).content[0]?.text ?? '{}') as Envelope;
const failed = (err: Error): Envelope => {
  const cause = err.cause as { code?: string; message?: string } | undefined;
  return { ok: false, error: { kind: 'client', message: `${err.message}${cause ? ` (${cause.code ?? ''} ${cause.message ?? ''})` : ''}` } };
};

/** Every answer ok and each with its own input back; what went wrong otherwise, counted by kind. */
function expectAllEchoed(answers: Envelope[], n: number, why: () => string): void {
  const wrong = new Map<string, number>();
  for (const a of answers) {
    if (a.ok) continue;
    const k = `${a.error?.kind}: ${a.error?.message.slice(0, 200)}`;
    wrong.set(k, (wrong.get(k) ?? 0) + 1);
  }
  expect([...wrong], why()).toEqual([]);
  expect(answers.map((a) => (a.data as { i: number }).i)).toEqual(Array.from({ length: n }, (_, i) => i));
}

describe('load on one forge serve --http', () => {
  it('1000 calls at once in a 2025-era session and 1000 in 2026-era requests: every one answered ok, the server stays up', {
    timeout: scaled(1_800_000),
  }, async () => {
    const s = busyProject();
    const server = await serveHttp(s);
    const legacy = new Client({ name: 'load-legacy', version: '1.0.0' });
    await legacy.connect(new StreamableHTTPClientTransport(server.url));
    onTestFinished(() => legacy.close().catch(() => {}));
    const made = await legacy.callTool({ name: 'forge_tool', arguments: ECHO });
    expect(made.isError, JSON.stringify(made)).toBe(false);
    const old = await Promise.all(
      Array.from({ length: 1000 }, (_, i) =>
        legacy.callTool({ name: 'echo', arguments: { i } }, undefined, { timeout: scaled(900_000) }).then(envelopeOf, failed),
      ),
    );
    expectAllEchoed(old, 1000, server.stderr);

    const modern = new ModernClient({ name: 'load-modern', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
    await modern.connect(new ModernTransport(server.url));
    onTestFinished(() => modern.close().catch(() => {}));
    expect(modern.getProtocolEra()).toBe('modern');
    const now = await Promise.all(
      Array.from({ length: 1000 }, (_, i) =>
        modern.callTool({ name: 'echo', arguments: { i } }, { timeout: scaled(900_000) }).then(envelopeOf, failed),
      ),
    );
    expectAllEchoed(now, 1000, server.stderr);
    expect(server.child.exitCode).toBe(null);
  });

  it('100 calls at once under ulimit -n 256: every one answered ok (runs wait for a free slot), the server stays up', {
    timeout: scaled(900_000),
  }, async () => {
    const s = busyProject();
    const server = await serveHttp(s, [], { files: 256 });
    const client = new Client({ name: 'load-small', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(server.url));
    onTestFinished(() => client.close().catch(() => {}));
    expect((await client.callTool({ name: 'forge_tool', arguments: ECHO })).isError).toBe(false);
    const answers = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        client.callTool({ name: 'echo', arguments: { i } }, undefined, { timeout: scaled(600_000) }).then(envelopeOf, failed),
      ),
    );
    expectAllEchoed(answers, 100, server.stderr);
    expect(server.child.exitCode).toBe(null);
  });

  it('200 sessions listening: a tool forged in one reaches all 200 as list_changed, and each lists it', {
    timeout: scaled(900_000),
  }, async () => {
    const s = busyProject();
    const server = await serveHttp(s);
    const clients: Client[] = [];
    const heard: Promise<void>[] = [];
    for (let i = 0; i < 200; i++) {
      const c = new Client({ name: `listener-${i}`, version: '1.0.0' });
      heard.push(new Promise<void>((resolve) => c.setNotificationHandler(ToolListChangedNotificationSchema, () => resolve())));
      await c.connect(new StreamableHTTPClientTransport(server.url));
      clients.push(c);
      onTestFinished(() => c.close().catch(() => {}));
      // Listed once: a change is news to it.
      await c.listTools();
    }
    const maker = clients[0] as Client;
    expect((await maker.callTool({ name: 'forge_tool', arguments: ECHO })).isError).toBe(false);
    await Promise.all(heard);
    const lists = await Promise.all(clients.map((c) => c.listTools()));
    expect(lists.filter((l) => !l.tools.some((t) => t.name === 'echo'))).toEqual([]);
    expect(server.child.exitCode).toBe(null);
  });
});
