import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Forge } from '@forge/runner';
import { createToolsmith, type Toolsmith } from '@forge/toolsmith';
import { Client as ModernClient, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as LegacyHttpTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { type CallToolResult, ElicitRequestSchema, type ElicitResult } from '@modelcontextprotocol/sdk/types.js';
import { describe, expect, it, onTestFinished } from 'vitest';
import { serveHttp } from '../src/index.js';
import { Inflight } from '../src/inflight.js';
import { buildServer } from '../src/server.js';
import { call, connect, envelopeOf, newForge, tempDirs, wordCountBlueprint } from './helpers.js';

/**
 * forge_approve: an operator persona approves a validated proposal through its MCP client, and
 * the human there confirms it (elicitation). The SDK clients of both eras, a real Forge over temp
 * dirs with the bwrap sandbox, and a real toolsmith (@forge/toolsmith).
 */

/** alice is an operator and an approver who may approve in her client; bob proposes. */
const POLICY = {
  toolsmith: {
    enabled: true,
    mode: { '*': 'governed' },
    capability_allow: ['text.*'],
    approvers: ['alice'],
    approve_in_client: true,
    gap_recurrence_threshold: 2,
  },
  operator_personas: ['alice'],
};

type Policy = Record<string, unknown>;
const withToolsmith = (extra: Record<string, unknown>, top: Policy = {}): Policy => ({
  ...POLICY,
  ...top,
  toolsmith: { ...POLICY.toolsmith, ...extra },
});

/** A word counter blueprint (with a second, optional property). */
const blueprint = () =>
  wordCountBlueprint({
    input_schema: {
      type: 'object',
      properties: { text: { type: 'string', maxLength: 200 }, lang: { type: 'string', maxLength: 8 } },
      required: ['text'],
      additionalProperties: false,
    },
  });

/** A Forge over temp dirs with `policy` in the project, its toolsmith, and a validated proposal of `proposer`. */
async function forgeWithProposal(policy: Policy, proposer = 'bob') {
  const dirs = tempDirs();
  const policyFile = join(dirs.project, '.forge', 'policy.json');
  writeFileSync(policyFile, JSON.stringify(policy));
  const forge: Forge = await newForge(dirs);
  const smith: Toolsmith = createToolsmith({ forge, onWarning: (m) => console.error(m) });
  onTestFinished(() => smith.close());
  const proposed = await smith.propose(blueprint(), { persona: proposer, session: 'proposer-session' });
  if (!proposed.ok) throw new Error(`the test proposal was refused: ${proposed.message}`);
  expect(proposed.proposal.state, JSON.stringify(proposed.proposal.validation?.summary)).toBe('validated');
  /**
   * Rewrites the project policy. The engine takes one look at the policy per turn of the event
   * loop, and the in-memory transport never leaves the turn: wait for the next one.
   */
  const setPolicy = async (p: Policy) => {
    writeFileSync(policyFile, JSON.stringify(p));
    await new Promise((resolve) => setImmediate(resolve));
  };
  return { forge, smith, id: proposed.proposal.id, setPolicy };
}

type Elicit = (params: Record<string, unknown>) => ElicitResult | Promise<ElicitResult>;

/** A 2025-era SDK client of `persona`, in process; with `elicit`, it declares elicitation and answers with it. */
async function legacyClient(forge: Forge, smith: Toolsmith, persona: string, elicit?: Elicit) {
  const asked: Record<string, unknown>[] = [];
  const { client, changes } = await connect(
    forge,
    { persona },
    {
      server: { toolsmith: smith },
      ...(elicit ? { capabilities: { elicitation: {} } } : {}),
      before: (c) => {
        if (elicit)
          c.setRequestHandler(ElicitRequestSchema, async (req) => {
            asked.push(req.params as Record<string, unknown>);
            return elicit(req.params as Record<string, unknown>);
          });
      },
    },
  );
  return { client, changes, asked };
}

const names = async (client: { listTools(): Promise<{ tools: { name: string }[] }> }) =>
  (await client.listTools()).tools.map((t) => t.name);
const accept = (approve = true, reason?: string): ElicitResult => ({
  action: 'accept',
  content: { approve, ...(reason ? { reason } : {}) },
});

describe('forge_approve on the 2025 era (elicitation/create)', () => {
  it('listed after forge_propose; the user is shown a review and accepts: the proposal goes live as approved by the persona, list_changed arrives, and the tool is callable', async () => {
    const { forge, smith, id } = await forgeWithProposal(POLICY);
    const { client, changes, asked } = await legacyClient(forge, smith, 'alice', () => accept());
    expect(await names(client)).toEqual([
      'forge_request',
      'forge_propose',
      'forge_approve',
      'forge_call',
      'forge_list',
      'forge_promote',
      'forge_remove',
    ]);
    const heard = changes.next();
    const { result, envelope } = await call(client, 'forge_approve', { id });
    expect(result.isError, JSON.stringify(envelope)).toBe(false);
    expect(envelope).toMatchObject({
      ok: true,
      data: { id, state: 'active', name: 'text.word_count', version: 1, approved_by: 'alice' },
    });
    await heard;
    // The log says the approval came through the client.
    const approved = readFileSync(forge.paths.auditLog, 'utf8')
      .split('\n')
      .filter((l) => l.includes('"toolsmith.approved"'))
      .map((l) => JSON.parse(l).data);
    expect(approved).toEqual([expect.objectContaining({ id, by: 'alice', via: 'client' })]);

    // What the human was asked: one form, with the review and {approve, reason?}.
    expect(asked).toHaveLength(1);
    const q = asked[0] as {
      mode?: string;
      message: string;
      requestedSchema: { properties: Record<string, { type: string }>; required: string[] };
    };
    expect(q.mode).toBe('form');
    expect(q.requestedSchema.properties.approve?.type).toBe('boolean');
    expect(q.requestedSchema.properties.reason?.type).toBe('string');
    expect(q.requestedSchema.required).toEqual(['approve']);
    for (const part of [
      `Proposal: ${id}`,
      'Tool name: text.word_count',
      'Capability: text.word_count',
      'Proposed by persona: bob',
      'Counts the words of a text',
      'Input: text (required), lang',
      'sandbox runs)',
      'len(args["text"].split())',
      'the agent cannot approve it',
    ])
      expect(q.message).toContain(part);
    expect(q.message).toMatch(/Validation: passed, .* \(\d+ sandbox runs\)/);

    expect((await smith.get(id))?.activated?.by).toBe('alice');
    const listed = (await client.listTools()).tools.find(
      (t) => (t._meta as { forge?: { name?: string } })?.forge?.name === 'text.word_count',
    );
    expect(listed).toBeDefined();
    const used = (await client.callTool({ name: listed?.name as string, arguments: { text: 'a b c d' } })) as CallToolResult;
    expect(used.isError).toBe(false);
    expect(used.structuredContent).toEqual({ words: 4 });
  });

  it('decline, cancel and accept with approve false each answer policy_denied "not approved at the client", and nothing goes live', async () => {
    const { forge, smith, id } = await forgeWithProposal(POLICY);
    const answers: ElicitResult[] = [{ action: 'decline' }, { action: 'cancel' }, accept(false, 'the regex is too loose')];
    const { client, asked } = await legacyClient(forge, smith, 'alice', () => answers[asked.length - 1] as ElicitResult);
    const before = await names(client);
    const whys: string[] = [];
    for (let i = 0; i < answers.length; i++) {
      const { result, envelope } = await call(client, 'forge_approve', { id });
      expect(result.isError).toBe(true);
      expect(envelope).toMatchObject({
        ok: false,
        error: { kind: 'policy_denied', message: expect.stringContaining('not approved at the client') },
      });
      whys.push((envelope as { error: { message: string } }).error.message);
    }
    expect(asked).toHaveLength(3);
    expect(whys[0]).toContain('the user chose decline');
    expect(whys[1]).toContain('the user chose cancel');
    expect(whys[2]).toContain('reason: the regex is too loose');
    expect((await smith.get(id))?.state).toBe('validated');
    expect(await names(client)).toEqual(before);
    expect((await forge.listTools({ persona: 'alice' })).some((l) => l.tool.name === 'text.word_count')).toBe(false);
  });

  it('a client without the elicitation capability is not offered forge_approve, and a call is refused pointing at forge toolsmith approve', async () => {
    const { forge, smith, id } = await forgeWithProposal(POLICY);
    const { client } = await legacyClient(forge, smith, 'alice');
    expect(await names(client)).not.toContain('forge_approve');
    const { result, envelope } = await call(client, 'forge_approve', { id });
    expect(result.isError).toBe(true);
    expect(envelope).toMatchObject({
      ok: false,
      error: { kind: 'policy_denied', message: expect.stringContaining(`forge toolsmith approve ${id}`) },
    });
    expect((envelope as { error: { message: string } }).error.message).toContain('elicitation');
    expect((await smith.get(id))?.state).toBe('validated');
  });

  const notOffered: [string, Policy, string][] = [
    ['a persona that is not an operator', { ...POLICY, operator_personas: [] }, 'alice'],
    ['approve_in_client false', withToolsmith({ approve_in_client: false }), 'alice'],
    ['an operator that is not an approver', withToolsmith({}, { operator_personas: ['alice', 'carol'] }), 'carol'],
  ];
  for (const [label, policy, persona] of notOffered)
    it(`not offered, and refused without asking the user: ${label}`, async () => {
      const { forge, smith, id } = await forgeWithProposal(policy);
      const { client, asked } = await legacyClient(forge, smith, persona, () => accept());
      expect(await names(client)).toEqual(['forge_request', 'forge_propose', 'forge_call', 'forge_list', 'forge_promote', 'forge_remove']);
      const { result, envelope } = await call(client, 'forge_approve', { id });
      expect(result.isError).toBe(true);
      expect(envelope).toMatchObject({
        ok: false,
        error: { kind: 'policy_denied', message: expect.stringContaining(`persona "${persona}" may not approve through its client`) },
      });
      expect(asked).toHaveLength(0);
      expect((await smith.get(id))?.state).toBe('validated');
    });

  it("the proposer itself (an operator and approver too) may not approve its own proposal: refused without asking the user; the toolsmith's approve refuses it the same way", async () => {
    const policy = withToolsmith({ approvers: ['alice', 'bob'] }, { operator_personas: ['alice', 'bob'] });
    const { forge, smith, id } = await forgeWithProposal(policy, 'bob');
    const { client, asked } = await legacyClient(forge, smith, 'bob', () => accept());
    expect(await names(client)).toContain('forge_approve');
    const { result, envelope } = await call(client, 'forge_approve', { id });
    expect(result.isError).toBe(true);
    expect(envelope).toMatchObject({
      ok: false,
      error: { kind: 'policy_denied', message: `"bob" proposed ${id} and may not approve it; another approver must` },
    });
    expect(asked).toHaveLength(0);
    // Same words as the toolsmith's own refusal, which stays the authority.
    expect(await smith.approve(id, { by: 'bob' })).toMatchObject({
      ok: false,
      kind: 'policy_denied',
      message: (envelope as { error: { message: string } }).error.message,
    });
    expect((await smith.get(id))?.state).toBe('validated');
  });

  it("the kill switch set while the user reads the review: the user accepts, and the toolsmith's paused refusal passes through; nothing goes live", async () => {
    const { forge, smith, id, setPolicy } = await forgeWithProposal(POLICY);
    const { client, asked } = await legacyClient(forge, smith, 'alice', async () => {
      await setPolicy(withToolsmith({ paused: true }));
      return accept();
    });
    const { result, envelope } = await call(client, 'forge_approve', { id });
    expect(asked).toHaveLength(1);
    expect(result.isError).toBe(true);
    expect(envelope).toMatchObject({
      ok: false,
      error: { kind: 'policy_denied', message: expect.stringContaining('the toolsmith is paused, so nothing can be approved') },
    });
    expect((await smith.get(id))?.state).toBe('validated');
  });

  it('shutdown begun while the user reads the review: waiting for the person holds no place in flight (drain ends at once), and the late accept approves nothing', async () => {
    const { forge, smith, id } = await forgeWithProposal(POLICY);
    const inflight = new Inflight();
    const { server } = buildServer(forge, { ctx: { persona: 'alice' }, toolsmith: smith }, inflight);
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    const client = new Client({ name: 'forge-approve-drain', version: '1.0.0' }, { capabilities: { elicitation: {} } });
    let drained: Promise<void> | undefined;
    client.setRequestHandler(ElicitRequestSchema, async () => {
      // A grace far longer than the test's timeout: drain ends only if nothing is counted in flight.
      drained = inflight.drain(600_000, 'the test shuts down');
      await drained;
      return accept();
    });
    await server.connect(serverSide);
    await client.connect(clientSide);
    onTestFinished(async () => {
      await client.close();
      await server.close();
    });
    const { result, envelope } = await call(client, 'forge_approve', { id });
    expect(drained).toBeDefined();
    expect(result.isError).toBe(true);
    expect(envelope).toMatchObject({
      ok: false,
      error: { kind: 'cancelled', message: expect.stringContaining('the test shuts down and takes no new calls') },
    });
    expect((envelope as { error: { message: string } }).error.message).toContain('nothing was approved');
    expect((await smith.get(id))?.state).toBe('validated');
  });

  it('a proposal that is not validated is refused without asking; an unknown id gets the toolsmith refusal', async () => {
    const { forge, smith, id } = await forgeWithProposal(POLICY);
    const { client, asked } = await legacyClient(forge, smith, 'alice', () => accept());
    const rejected = await smith.reject(id, { by: 'alice', reason: 'not needed' });
    expect(rejected.ok).toBe(true);
    const r1 = await call(client, 'forge_approve', { id });
    expect(r1.envelope).toMatchObject({
      ok: false,
      error: { kind: 'state_conflict', message: expect.stringContaining('rejected, not validated') },
    });
    const r2 = await call(client, 'forge_approve', { id: 'p-0000000000000000' });
    expect(r2.result.isError).toBe(true);
    expect(r2.envelope).toMatchObject({
      ok: false,
      error: { kind: 'unknown_proposal', message: expect.stringContaining('forge toolsmith list') },
    });
    expect(asked).toHaveLength(0);
  });
});

describe('forge_approve on the 2025 era over Streamable HTTP (a session)', () => {
  it("the elicitation rides the call's stream: the token's persona approves once its user accepts", async () => {
    const { forge, smith, id } = await forgeWithProposal(POLICY);
    const server = await serveHttp(forge, { tokens: { 'token-of-alice-0123456789': { persona: 'alice' } }, toolsmith: smith });
    onTestFinished(() => server.close());
    const client = new Client({ name: 'forge-approve-http', version: '1.0.0' }, { capabilities: { elicitation: {} } });
    const asked: string[] = [];
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push((req.params as { message: string }).message);
      return accept();
    });
    await client.connect(
      new LegacyHttpTransport(new URL(server.url), { requestInit: { headers: { Authorization: 'Bearer token-of-alice-0123456789' } } }),
    );
    onTestFinished(() => client.close());
    expect(await names(client)).toContain('forge_approve');
    const { result, envelope } = await call(client, 'forge_approve', { id });
    expect(result.isError, JSON.stringify(envelope)).toBe(false);
    expect(envelope).toMatchObject({ ok: true, data: { id, state: 'active', approved_by: 'alice' } });
    expect(asked).toHaveLength(1);
    expect(asked[0]).toContain('Proposed by persona: bob');
    expect((await smith.get(id))?.activated?.by).toBe('alice');
  });
});

describe('forge_approve on the 2026-07-28 era (input_required, inputResponses)', () => {
  /** serveHttp with alice's token, and a 2026 client; with `elicit`, it declares elicitation and answers with it. */
  async function modern(forge: Forge, smith: Toolsmith, elicit?: Elicit, o: { manual?: boolean } = {}) {
    const server = await serveHttp(forge, { tokens: { 'token-of-alice-0123456789': { persona: 'alice' } }, toolsmith: smith });
    onTestFinished(() => server.close());
    const client = new ModernClient(
      { name: 'forge-approve-modern', version: '1.0.0' },
      {
        versionNegotiation: { mode: { pin: '2026-07-28' } },
        ...(elicit ? { capabilities: { elicitation: { form: {} } } } : {}),
        ...(o.manual ? { inputRequired: { autoFulfill: false } } : {}),
      },
    );
    const asked: Record<string, unknown>[] = [];
    if (elicit)
      client.setRequestHandler('elicitation/create', async (req) => {
        asked.push(req.params as Record<string, unknown>);
        return elicit(req.params as Record<string, unknown>) as never;
      });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(server.url), {
        requestInit: { headers: { authorization: 'Bearer token-of-alice-0123456789' } },
      }),
    );
    onTestFinished(() => client.close());
    expect(client.getProtocolEra()).toBe('modern');
    return { client, asked };
  }

  it("the client's elicitation handler accepts: the proposal goes live, and the next tools/list has the tool", async () => {
    const { forge, smith, id } = await forgeWithProposal(POLICY);
    const { client, asked } = await modern(forge, smith, () => accept());
    expect(await names(client)).toContain('forge_approve');
    const envelope = envelopeOf(await client.callTool({ name: 'forge_approve', arguments: { id } }));
    expect(envelope).toMatchObject({ ok: true, data: { id, state: 'active', approved_by: 'alice' } });
    expect(asked).toHaveLength(1);
    expect((asked[0] as { message: string }).message).toContain(`Proposal: ${id}`);
    const listed = (await client.listTools()).tools.find(
      (t) => (t._meta as { forge?: { name?: string } })?.forge?.name === 'text.word_count',
    );
    expect(listed).toBeDefined();
    const used = await client.callTool({ name: listed?.name as string, arguments: { text: 'x y' } });
    expect(used.structuredContent).toEqual({ words: 2 });
  });

  it('declined on 2026: policy_denied, nothing goes live; a 2026 client without elicitation is not offered it and is refused', async () => {
    const { forge, smith, id } = await forgeWithProposal(POLICY);
    const { client } = await modern(forge, smith, () => ({ action: 'decline' }));
    const declined = envelopeOf(await client.callTool({ name: 'forge_approve', arguments: { id } }));
    expect(declined).toMatchObject({
      ok: false,
      error: { kind: 'policy_denied', message: expect.stringContaining('not approved at the client') },
    });
    const plain = await modern(forge, smith);
    expect(await names(plain.client)).not.toContain('forge_approve');
    const refused = envelopeOf(await plain.client.callTool({ name: 'forge_approve', arguments: { id } }));
    expect(refused).toMatchObject({
      ok: false,
      error: { kind: 'policy_denied', message: expect.stringContaining(`forge toolsmith approve ${id}`) },
    });
    expect((await smith.get(id))?.state).toBe('validated');
  });

  it('an answer with an altered request state, or with none, approves nothing (the client can only answer the question forge asked)', async () => {
    const { forge, smith, id } = await forgeWithProposal(POLICY);
    const { client } = await modern(forge, smith, () => accept(), { manual: true });
    const first = (await client.callTool({ name: 'forge_approve', arguments: { id } }, { allowInputRequired: true })) as unknown as {
      resultType: string;
      inputRequests: Record<string, unknown>;
      requestState: string;
    };
    expect(first.resultType).toBe('input_required');
    expect(Object.keys(first.inputRequests)).toEqual(['approval']);
    const answer = { approval: { action: 'accept', content: { approve: true } } };
    const forged = `${first.requestState.slice(0, -4)}AAAA`;
    for (const params of [
      { name: 'forge_approve', arguments: { id }, inputResponses: answer, requestState: forged },
      { name: 'forge_approve', arguments: { id }, inputResponses: answer },
    ]) {
      const r = envelopeOf(await client.callTool(params as never, { allowInputRequired: true }));
      expect(r).toMatchObject({ ok: false, error: { kind: 'policy_denied', message: expect.stringContaining('nothing was approved') } });
    }
    expect((await smith.get(id))?.state).toBe('validated');
    // The genuine state with the same answer does approve.
    const ok = envelopeOf(
      await client.callTool(
        { name: 'forge_approve', arguments: { id }, inputResponses: answer, requestState: first.requestState } as never,
        {
          allowInputRequired: true,
        },
      ),
    );
    expect(ok).toMatchObject({ ok: true, data: { state: 'active' } });
  });
});
