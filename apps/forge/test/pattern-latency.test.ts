import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { waitFor } from '@forge/test-utils';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { py, requireCliAndSandbox, scratch, serveHttp } from './helpers.js';

beforeAll(requireCliAndSandbox);

async function client(url: URL, name: string): Promise<Client> {
  const c = new Client({ name, version: '1.0.0' });
  await c.connect(new StreamableHTTPClientTransport(url));
  onTestFinished(() => c.close().catch(() => {}));
  return c;
}

function envelope(r: unknown): { ok: boolean; error?: { kind: string; message: string } } {
  return JSON.parse((r as { content: { text: string }[] }).content[0]?.text ?? '{}');
}

const percentile = (xs: number[], p: number): number =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))] ?? 0;

describe('a catastrophic schema on one session does not stall another', () => {
  it('client A sends hostile inputs to ^(a|aa)*$ and a 2^40-path $ref schema; client B keeps calling forge_list', async () => {
    const s = scratch();
    writeFileSync(join(s.home, 'policy.json'), JSON.stringify({ breakers: { per_tool_rpm: 100000, per_session_forge_count: 100000 } }));
    const { url } = await serveHttp(s);
    const a = await client(url, 'hostile');
    const b = await client(url, 'bystander');

    const echo = 'print(json.dumps({"ok": True, "data": len(args["s"])}))';
    const patterned = await a.callTool({
      name: 'forge_tool',
      arguments: py('redos', echo, {
        input_schema: { type: 'object', properties: { s: { type: 'string', pattern: '^(a|aa)*$' } }, required: ['s'] },
      }),
    });
    expect(patterned.isError, JSON.stringify(patterned)).toBe(false);
    const defs: Record<string, unknown> = { d40: { type: 'string', minLength: 5 } };
    for (let i = 0; i < 40; i++) defs[`d${i}`] = { anyOf: [{ $ref: `#/$defs/d${i + 1}` }, { $ref: `#/$defs/d${i + 1}` }] };
    const shaped = await a.callTool({
      name: 'forge_tool',
      arguments: py('refdag', echo, {
        input_schema: { type: 'object', $defs: defs, properties: { s: { $ref: '#/$defs/d0' } }, required: ['s'] },
      }),
    });
    expect(shaped.isError, JSON.stringify(shaped)).toBe(false);

    // B measures forge_list round trips for as long as A's hostile calls last.
    // Each round trip is filed under the schema A was calling when it started.
    let hostileDone = false;
    type Phase = 'pattern' | 'refdag';
    let phase = 'pattern' as Phase;
    const latencies: Record<Phase, number[]> = { pattern: [], refdag: [] };
    const bystander = (async () => {
      while (!hostileDone) {
        const during = phase;
        const t = performance.now();
        const r = await b.callTool({ name: 'forge_list', arguments: {} });
        latencies[during].push(performance.now() - t);
        expect(r.isError).toBe(false);
      }
    })();

    const verdicts: Array<{ call: string; ms: number; kind: string | undefined; ok: boolean }> = [];
    const call = async (label: string, name: string, value: string) => {
      const t = performance.now();
      const e = envelope(await a.callTool({ name, arguments: { s: value } }));
      verdicts.push({ call: label, ms: Math.round(performance.now() - t), kind: e.error?.kind, ok: e.ok });
      return e;
    };
    try {
      // Give B a head start so its loop is running when A's calls land: its first round trip is back.
      await waitFor("the bystander's first forge_list round trip", () => latencies.pattern.length > 0);
      for (const n of [30, 1000, 100_000]) {
        const e = await call(`redos hostile ${n}`, 'redos', `${'a'.repeat(n)}!`);
        expect(e).toMatchObject({
          ok: false,
          error: { kind: 'validation_failed', message: expect.stringContaining('must match pattern') },
        });
      }
      expect(await call('redos matching 1000', 'redos', 'a'.repeat(1000))).toMatchObject({ ok: true, data: 1000 });
      phase = 'refdag';
      const stopped = await call('refdag x', 'refdag', 'x');
      expect(stopped).toMatchObject({
        ok: false,
        error: { kind: 'validation_failed', message: expect.stringContaining('validation was stopped') },
      });
    } finally {
      hostileDone = true;
      await bystander;
    }

    expect(latencies.pattern.length).toBeGreaterThan(0);
    expect(latencies.refdag.length).toBeGreaterThan(0);
    const figures = (xs: number[]) =>
      `${xs.length} calls, p50 ${percentile(xs, 50).toFixed(1)} ms, p99 ${percentile(xs, 99).toFixed(1)} ms, max ${Math.max(...xs).toFixed(1)} ms`;
    console.log(
      `hostile calls: ${verdicts.map((v) => `${v.call} → ${v.ok ? 'ok' : v.kind} in ${v.ms} ms`).join('; ')}\n` +
        `forge_list on the other session during the pattern calls: ${figures(latencies.pattern)}\n` +
        `forge_list on the other session during the $ref call (stopped at the validation budget): ${figures(latencies.refdag)}`,
    );
  });
});
