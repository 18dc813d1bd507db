import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Forge } from '@forge/runner';
import { scaled, waitFor } from '@forge/test-utils';
import { createToolsmith, type Toolsmith } from '@forge/toolsmith';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { describe, expect, it, onTestFinished } from 'vitest';
import { serveHttp, type ToolsmithSurface } from '../src/index.js';
import { call, connect, forgeOk, newForge, py, runsStarted, tempDirs, wordCountBlueprint } from './helpers.js';

/**
 * The toolsmith on the MCP surface, end to end: the SDK client, a real Forge over temp dirs with
 * the bwrap sandbox, and a real toolsmith (@forge/toolsmith) validating proposals in it.
 */

// The toolsmith is what the server's option takes (checked by the typecheck of this file).
const _fits = (t: Toolsmith): ToolsmithSurface => t;

const GOVERNED = {
  enabled: true,
  mode: { '*': 'governed' },
  capability_allow: ['text.*'],
  approvers: ['alice'],
  gap_recurrence_threshold: 2,
};

/** A Forge over temp dirs whose project policy has `toolsmith`, and its toolsmith (closed after the test). */
async function forgeWithToolsmith(toolsmith: Record<string, unknown>) {
  const dirs = tempDirs();
  const policyFile = join(dirs.project, '.forge', 'policy.json');
  writeFileSync(policyFile, JSON.stringify({ toolsmith }));
  let smith: Toolsmith | undefined;
  const forge: Forge = await newForge(dirs, { onUnknownTool: (n, c) => smith?.unknownTool(n, c) });
  smith = createToolsmith({ forge, onWarning: (m) => console.error(m) });
  const s = smith;
  onTestFinished(() => s.close());
  return { forge, smith, policyFile, project: dirs.project };
}

/** A Forge whose project policy has `toolsmith`, its toolsmith, and an SDK client of persona `bob`. */
async function setup(toolsmith: Record<string, unknown>, o: { attach?: boolean } = {}) {
  const { forge, smith, policyFile } = await forgeWithToolsmith(toolsmith);
  const { client, changes } = await connect(forge, { persona: 'bob' }, o.attach === false ? {} : { server: { toolsmith: smith } });
  /**
   * Rewrites the project policy. The engine takes one look at the policy per turn of the event
   * loop, and the in-memory transport never leaves the turn: the next call starts in a new one.
   */
  const setPolicy = async (t: Record<string, unknown>) => {
    writeFileSync(policyFile, JSON.stringify({ toolsmith: t }));
    await new Promise((resolve) => setImmediate(resolve));
  };
  return { forge, smith, client, changes, setPolicy };
}

const names = async (client: Client) => (await client.listTools()).tools.map((t) => t.name);

const blueprint = wordCountBlueprint;

type Data = Record<string, unknown>;
const dataOf = (envelope: unknown) => (envelope as { data: Data }).data;

describe('the toolsmith over MCP (governed persona)', () => {
  it('lists forge_request and forge_propose instead of forge_tool; forge_tool is refused pointing at forge_propose; the instructions say so', async () => {
    const { client } = await setup(GOVERNED);
    expect(await names(client)).toEqual(['forge_request', 'forge_propose', 'forge_call', 'forge_list', 'forge_promote', 'forge_remove']);
    expect(client.getInstructions()).toContain('forge_propose');
    expect(client.getInstructions()).not.toContain('forge_tool');
    const { result, envelope } = await call(client, 'forge_tool', py('text.direct', 'print("{}")'));
    expect(result.isError).toBe(true);
    expect(envelope).toMatchObject({
      ok: false,
      error: { kind: 'policy_denied', message: expect.stringMatching(/governed mode.*forge_propose/) },
    });
  });

  it('an unknown tool asked for twice: the second unknown_tool message says a tool is wanted and how to propose it; forge_request records the need', async () => {
    const { client } = await setup(GOVERNED);
    const first = await call(client, 'text_reverse', { text: 'abc' });
    expect(first.result.isError).toBe(true);
    expect(first.envelope).toMatchObject({ ok: false, error: { kind: 'unknown_tool', message: expect.stringContaining('1 of 2') } });
    expect((first.envelope as { error: { message: string } }).error.message).toContain('forge_request');
    const second = await call(client, 'text_reverse', { text: 'abc' });
    expect(second.envelope).toMatchObject({
      ok: false,
      error: {
        kind: 'unknown_tool',
        message: expect.stringMatching(/is wanted: propose one with forge_propose \{capability: "text[._]reverse"/),
      },
    });
    const asked = await call(client, 'forge_request', { capability: 'text.upper', description: 'upper-cases a text' });
    expect(asked.result.isError).toBe(false);
    expect(dataOf(asked.envelope)).toMatchObject({ capability: 'text.upper', authorable: true, requests_in_window: 1, wanted: false });
    const outside = await call(client, 'forge_request', { capability: 'net.fetch', description: 'fetches a URL' });
    expect(dataOf(outside.envelope)).toMatchObject({ capability: 'net.fetch', authorable: false });
    expect(dataOf(outside.envelope).message).toContain('capability_allow');
  });

  it('a proposal with a wrong example is an ok answer in state failed with the failing check, and never listed; a capability outside capability_allow is refused', async () => {
    const { client, smith } = await setup(GOVERNED);
    const before = await names(client);
    const bad = blueprint({ examples: [{ input: { text: 'one two three' }, expect: { words: 4 } }] });
    const { result, envelope } = await call(client, 'forge_propose', bad);
    expect(result.isError).toBe(false);
    const data = dataOf(envelope);
    expect(data).toMatchObject({ state: 'failed', capability: 'text.word_count', validation: { ok: false } });
    const failed = (data.validation as { failed: { kind: string; label: string; verdict: string; input?: unknown }[] }).failed;
    expect(failed[0]).toMatchObject({ kind: 'example', input: { text: 'one two three' }, verdict: expect.stringContaining('/words') });
    expect(data.message).toMatch(/failed validation.*propose again/);
    expect(await names(client)).toEqual(before);
    // It can never be approved.
    expect(await smith.approve(data.id as string, { by: 'alice' })).toMatchObject({ ok: false, kind: 'state_conflict' });

    const outside = await call(client, 'forge_propose', blueprint({ capability: 'net.fetch' }));
    expect(outside.result.isError).toBe(true);
    expect(outside.envelope).toMatchObject({
      ok: false,
      error: { kind: 'policy_denied', message: expect.stringContaining('capability_allow') },
    });
  });

  it('a good proposal validates (network and secrets asked for are listed as ignored); approved in process, the client hears list_changed, lists it and calls it', async () => {
    const { client, smith, changes, forge } = await setup(GOVERNED);
    await names(client);
    const { result, envelope } = await call(
      client,
      'forge_propose',
      blueprint({ name: 'my_counter', network: 'allow', meta: { secrets: ['API_KEY'], timeout_ms: scaled(5000) } }),
    );
    expect(result.isError, JSON.stringify(envelope)).toBe(false);
    const data = dataOf(envelope);
    expect(data).toMatchObject({ state: 'validated', name: 'text.word_count', validation: { ok: true } });
    expect((data.validation as Data).failed).toBeUndefined();
    expect((data.validation as { sandbox_runs: number }).sandbox_runs).toBeGreaterThanOrEqual(3);
    expect(data.ignored).toEqual(['name', 'network', 'meta.secrets']);
    expect(data.message).toContain(`approve ${data.id}`);
    expect(await names(client)).not.toContain('text_word_count');

    const heard = changes.next();
    const approved = await smith.approve(data.id as string, { by: 'alice' });
    expect(approved).toMatchObject({ ok: true, proposal: { state: 'active' } });
    await heard;
    const listed = (await client.listTools()).tools.find(
      (t) => (t._meta as { forge?: { name?: string } })?.forge?.name === 'text.word_count',
    );
    expect(listed?.name).toBeDefined();
    const wire = listed?.name as string;
    const used = (await client.callTool({ name: wire, arguments: { text: 'a b c d' } })) as CallToolResult;
    expect(used.isError).toBe(false);
    expect(used.structuredContent).toEqual({ words: 4 });
    // What went live took no secrets from the blueprint.
    const live = (await forge.listTools({ persona: 'bob' })).find((l) => l.tool.name === 'text.word_count');
    expect(live?.tool.meta?.secrets).toBeUndefined();
  });
});

describe('the toolsmith over MCP (off, direct, not attached)', () => {
  it('enabled false: the two meta-tools are not listed (a governed persona still gets no forge_tool), and a call gets the toolsmith refusal as isError', async () => {
    const { client } = await setup({ ...GOVERNED, enabled: false });
    expect(await names(client)).toEqual(['forge_call', 'forge_list', 'forge_promote', 'forge_remove']);
    const { result, envelope } = await call(client, 'forge_propose', blueprint());
    expect(result.isError).toBe(true);
    expect(envelope).toMatchObject({ ok: false, error: { kind: 'policy_denied', message: expect.stringContaining('toolsmith is off') } });
  });

  it('a direct persona lists forge_tool and, while enabled, the two; switching the policy off mid-session is list_changed at the next call; paused passes the refusal through', async () => {
    const { client, changes, setPolicy } = await setup({ ...GOVERNED, mode: { '*': 'direct' } });
    expect(await names(client)).toEqual([
      'forge_tool',
      'forge_request',
      'forge_propose',
      'forge_call',
      'forge_list',
      'forge_promote',
      'forge_remove',
    ]);
    expect(client.getInstructions()).toMatch(/forge_tool to create a tool.*Where forge_tool is not in your tool list.*forge_propose/);
    await setPolicy({ ...GOVERNED, mode: { '*': 'direct' }, paused: true });
    const paused = await call(client, 'forge_request', { capability: 'text.upper', description: 'upper-cases a text' });
    expect(paused.result.isError, JSON.stringify(paused.envelope)).toBe(true);
    expect(paused.envelope).toMatchObject({ ok: false, error: { kind: 'policy_denied', message: expect.stringContaining('paused') } });
    const count = changes.count();
    await setPolicy({ ...GOVERNED, enabled: false });
    const heard = changes.next();
    await call(client, 'forge_list');
    await heard;
    expect(changes.count()).toBe(count + 1);
    expect(await names(client)).toEqual(['forge_call', 'forge_list', 'forge_promote', 'forge_remove']);
  });

  it('without a toolsmith attached, forge_propose is an unknown tool as before and forge_tool is listed', async () => {
    const { client } = await setup({ ...GOVERNED, mode: { '*': 'direct' } }, { attach: false });
    expect(await names(client)).toEqual(['forge_tool', 'forge_call', 'forge_list', 'forge_promote', 'forge_remove']);
    expect(client.getInstructions()).not.toContain('forge_propose');
    const { result, envelope } = await call(client, 'forge_propose', blueprint());
    expect(result.isError).toBe(true);
    expect(envelope).toMatchObject({ ok: false, error: { kind: 'unknown_tool' } });
  });
});

describe('the toolsmith over Streamable HTTP', () => {
  it("each token's persona gets its own listing (governed bob: forge_propose, direct coder: forge_tool too); once close() began, a forge_request is refused as cancelled", async () => {
    const { forge, smith, project } = await forgeWithToolsmith({ ...GOVERNED, mode: { '*': 'governed', coder: 'direct' } });
    const tokens = { 'token-of-bob-0123456789': { persona: 'bob' }, 'token-of-coder-0123456789': { persona: 'coder' } };
    const server = await serveHttp(forge, { tokens, toolsmith: smith, graceMs: scaled(5000) });
    onTestFinished(() => server.close());
    const client = async (token: string) => {
      const transport = new StreamableHTTPClientTransport(new URL(server.url), {
        requestInit: { headers: { Authorization: `Bearer ${token}` } },
      });
      const c = new Client({ name: 'forge-mcp-toolsmith-http', version: '1.0.0' });
      await c.connect(transport);
      onTestFinished(() => c.close());
      return c;
    };
    const bob = await client('token-of-bob-0123456789');
    const coder = await client('token-of-coder-0123456789');
    expect(await names(bob)).toEqual(['forge_request', 'forge_propose', 'forge_call', 'forge_list', 'forge_promote', 'forge_remove']);
    expect(await names(coder)).toEqual([
      'forge_tool',
      'forge_request',
      'forge_propose',
      'forge_call',
      'forge_list',
      'forge_promote',
      'forge_remove',
    ]);
    expect(bob.getInstructions()).not.toContain('forge_tool');
    await forgeOk(coder, py('slow', 'import time\ntime.sleep(0.6)\nprint(json.dumps({"ok": True, "data": "done"}))'));
    const runs = runsStarted(project);
    const pending = call(coder, 'slow');
    await waitFor('the call to start its run', () => runsStarted(project) > runs);
    const closing = server.close();
    const late = await call(bob, 'forge_request', { capability: 'text.upper', description: 'upper-cases a text' });
    expect(late.result.isError).toBe(true);
    expect(late.envelope).toMatchObject({
      ok: false,
      error: { kind: 'cancelled', message: expect.stringContaining('nothing was requested or proposed') },
    });
    expect((await pending).envelope).toMatchObject({ ok: true, data: 'done' });
    await closing;
    expect(smith.gaps.history('missing_tool', 'text.upper')).toEqual([]);
  });
});
