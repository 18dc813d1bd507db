/**
 * Wire names in the engine: a tool is callable by its forge name (`code.csv_stats`) or the name
 * MCP clients see (`code__csv_stats`), the gates always judge the forge name, and two tools that
 * would share a wire name are refused at forge and promote time across every visible scope
 * (session and task scopes are registries of their own), racing forges included.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { digestSpec, type StoredTool } from '@forge/registry';
import { describe, expect, it } from 'vitest';
import { type Envelope, wireName } from '../src/index.js';
import { py, setup } from './helpers.js';

const OK = 'print(json.dumps({"ok": True, "data": {"got": args}}))';

/** `tool` renamed as an older forge could have written it (digest and all), into `dir`. */
function writeTwin(dir: string, tool: StoredTool, name: string): void {
  const twin = { ...tool, name };
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  writeFileSync(join(dir, `${name}.json`), JSON.stringify({ ...twin, digest: digestSpec(twin) }), { mode: 0o600 });
}

function failure(e: Envelope): { kind: string; message: string } {
  if (e.ok) throw new Error(`expected a failure, got ${JSON.stringify(e)}`);
  return e.error;
}

describe('callTool by forge name or wire name', () => {
  it('runs code.csv_stats called as code__csv_stats, and records the forge name', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(py('code.csv_stats', OK))).ok).toBe(true);
    const byWire = await fx.forge.callTool('code__csv_stats', { n: 1 });
    expect(byWire).toMatchObject({ ok: true, data: { got: { n: 1 } } });
    const byName = await fx.forge.callTool('code.csv_stats', { n: 2 });
    expect(byName).toMatchObject({ ok: true, data: { got: { n: 2 } } });
    expect(fx.entries('forge.called').map((e) => e.data.name)).toEqual(['code.csv_stats', 'code.csv_stats']);
    expect(fx.forge.callCount('code.csv_stats')).toBe(2);
    const runId = byWire.ok ? (byWire.meta.run_id as string) : '';
    expect(fx.manifest(runId)).toMatchObject({ tool: { name: 'code.csv_stats' } });
  });

  it('judges the forge name in every gate when called by the wire name (ACL allows and denies it as such)', async () => {
    const fx = await setup();
    await fx.forge.forgeTool(py('code.csv_stats', OK));
    expect(await fx.forge.callTool('code__csv_stats', {}, { persona: 'guest', allowedTools: 'code.csv_stats' })).toMatchObject({
      ok: true,
    });
    // the wire name in an ACL is not the tool's name: it grants nothing
    const denied = failure(await fx.forge.callTool('code__csv_stats', {}, { persona: 'guest', allowedTools: 'code__csv_stats' }));
    expect(denied.kind).toBe('acl.persona_denied');
    expect(denied.message).toContain('"code.csv_stats"');
    expect(fx.entries('acl.persona_denied').at(-1)?.data).toMatchObject({ name: 'code.csv_stats' });
  });

  it('unknown_tool names both forms when they differ, and keeps the plain message otherwise', async () => {
    const fx = await setup();
    expect(failure(await fx.forge.callTool('code__csv_stats', {}))).toEqual({
      kind: 'unknown_tool',
      message:
        'no forged tool is named "code__csv_stats" or has it as its wire name (forge name "code.csv_stats"); call forge_list to see the tools, or forge_tool to create it',
    });
    expect(failure(await fx.forge.callTool('code.csv_stats', {}))).toEqual({
      kind: 'unknown_tool',
      message:
        'no forged tool is named "code.csv_stats" (wire name "code__csv_stats"); call forge_list to see the tools, or forge_tool to create it',
    });
    expect(failure(await fx.forge.callTool('nope', {}))).toEqual({
      kind: 'unknown_tool',
      message: 'no forged tool is named "nope"; call forge_list to see the tools, or forge_tool to create it',
    });
    expect(failure(await fx.forge.callTool('forge_call', {})).message).toBe(
      '"forge_call" is a meta-tool served by the MCP server, not a forged tool',
    );
  });

  it('a wire name two older tools share names neither; their forge names still work; the listing marks them', async () => {
    const fx = await setup();
    const made = await fx.forge.forgeTool(py('x_.y', OK));
    if (!made.ok) throw new Error(made.message);
    // a twin written by an older forge, which did not check wire names
    writeTwin(join(fx.project, '.forge', 'tools'), made.tool, 'x._y');
    const forge = await fx.reopen();
    const ambiguous = failure(await forge.callTool('x___y', {}));
    expect(ambiguous).toEqual({
      kind: 'unknown_tool',
      message: '"x___y" is the wire name of several tools ("x._y", "x_.y"), so it names none of them; call one by its forge name',
    });
    expect(await forge.callTool('x._y', {})).toMatchObject({ ok: true });
    expect((await forge.listTools()).map((t) => [t.tool.name, t.wireName, t.wireConflict])).toEqual([
      ['x._y', 'x___y', ['x_.y']],
      ['x_.y', 'x___y', ['x._y']],
    ]);
  });
});

describe('forge-time refusal across registries', () => {
  it('refuses a__b in the project beside a.b in the session, and the other way round in the task scope', async () => {
    const fx = await setup();
    const s = { session: 'sess-a', task: 'task-1' };
    expect((await fx.forge.forgeTool(py('a.b', OK), { ...s, scope: 'session' })).ok).toBe(true);
    expect(await fx.forge.forgeTool(py('a__b', OK), { ...s, scope: 'project' })).toEqual({
      ok: false,
      kind: 'name_taken',
      message:
        'tool "a__b" and the existing tool "a.b" (session scope) would both be served to MCP clients as "a__b" (on the wire every "." becomes "__", and wire names are compared regardless of case); choose another name for "a__b"',
    });
    expect(await fx.forge.forgeTool(py('A__B', OK), { ...s, scope: 'task' })).toMatchObject({ ok: false, kind: 'name_taken' });
    // the same name shadows itself as always
    expect((await fx.forge.forgeTool(py('a.b', OK), { ...s, scope: 'task' })).ok).toBe(true);
    expect(
      fx
        .entries('forge.created')
        .filter((e) => e.data.ok === false)
        .map((e) => [e.data.name, e.data.kind]),
    ).toEqual([
      ['a__b', 'name_taken'],
      ['A__B', 'name_taken'],
    ]);
    // another session does not see sess-a's tools: no collision there
    expect((await fx.forge.forgeTool(py('a__b', OK), { session: 'sess-b', scope: 'session' })).ok).toBe(true);
  });

  it('refuses a meta-tool name in any case: the policy forbids forge_* first (the registry would say name_taken)', async () => {
    const fx = await setup();
    for (const name of ['FORGE_CALL', 'Forge_List', 'forge_call']) {
      expect(await fx.forge.forgeTool(py(name, OK), { scope: 'session' })).toMatchObject({ ok: false, kind: 'name_forbidden' });
    }
  });

  it('two concurrent forges of a.b (session) and a__b (project): never both', async () => {
    const fx = await setup();
    for (let round = 0; round < 5; round++) {
      const session = `race-${round}`;
      const results = await Promise.all([
        fx.forge.forgeTool(py(`r${round}.x`, OK), { session, scope: 'session' }),
        fx.forge.forgeTool(py(`r${round}__x`, OK), { session, scope: 'project' }),
      ]);
      expect(
        results.filter((r) => r.ok),
        `round ${round}`,
      ).toHaveLength(1);
      expect(results.find((r) => !r.ok)).toMatchObject({ kind: 'name_taken' });
      const listed = await fx.forge.listTools({ session });
      expect(listed.filter((t) => t.wireName === `r${round}__x`)).toHaveLength(1);
    }
  });

  it('promote refuses a tool whose wire name a user tool has (another project promoted a__b)', async () => {
    const a = await setup();
    expect((await a.forge.forgeTool(py('a__b', OK))).ok).toBe(true);
    expect((await a.forge.promoteTool('a__b')).ok).toBe(true);
    const b = await setup({ home: a.home });
    // b's a.b exists from before (an older forge): written beside the project's tools by hand
    const made = await a.forge.forgeTool(py('other', OK));
    if (!made.ok) throw new Error(made.message);
    writeTwin(join(b.project, '.forge', 'tools'), made.tool, 'a.b');
    const forge = await b.reopen();
    expect(await forge.promoteTool('a.b')).toEqual({
      ok: false,
      kind: 'promote_conflict',
      message:
        'tool "a.b" and the existing tool "a__b" (user scope) would both be served to MCP clients as "a__b" (on the wire every "." becomes "__", and wire names are compared regardless of case); rename the tool before promoting it',
    });
  });

  it('every listed tool carries the wire name clients see', async () => {
    const fx = await setup();
    const long = 'analytics.reports.quarterly.revenue_by_region.eur.normalised';
    for (const n of ['greet', 'code.csv_stats', long]) expect((await fx.forge.forgeTool(py(n, OK))).ok).toBe(true);
    const rows = await fx.forge.listTools();
    expect(rows.map((t) => [t.tool.name, t.wireName])).toEqual([
      [long, 'analytics__reports__quarterly__revenue_by_region__eur___51b5eb12'],
      ['code.csv_stats', 'code__csv_stats'],
      ['greet', 'greet'],
    ]);
    for (const t of rows) expect(t.wireName).toBe(wireName(t.tool.name));
    expect(await fx.forge.callTool('analytics__reports__quarterly__revenue_by_region__eur___51b5eb12', {})).toMatchObject({ ok: true });
  });
});
