// The surface beyond tools — prompts, completions, resources (tool specs, runs, artifacts, the
// audit tail), files and images in results, annotations, events — on both eras over both
// transports: the 2025 era with the SDK v1 client, the 2026-07-28 era with the v2 client, each over
// stdio (a real child process) and Streamable HTTP.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { waitFor } from '@forge/test-utils';
import { LOG_LEVEL_META_KEY, Client as ModernClient, StreamableHTTPClientTransport as ModernHttp } from '@modelcontextprotocol/client';
import { StdioClientTransport as ModernStdio } from '@modelcontextprotocol/client/stdio';
import { Client as LegacyClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as LegacyStdio } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport as LegacyHttp } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema, ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { describe, expect, it, onTestFinished } from 'vitest';
import { serveHttp } from '../src/index.js';
import { envelopeOf, newForge, PACKAGE_DIR, py, tempDirs } from './helpers.js';

type AnyClient = LegacyClient | ModernClient;
type Era = 'legacy' | 'modern';
type Wire = 'stdio' | 'http';
const FIXTURE = join(PACKAGE_DIR, 'test/fixtures/stdio-server.mjs');

/**
 * A client of `era` over `wire` as persona `alice`, and a Forge over the same home and project
 * (the server's own over HTTP; over stdio a second engine on the same files, for reads as another
 * persona).
 */
async function open(era: Era, wire: Wire): Promise<{ client: AnyClient; forge: Awaited<ReturnType<typeof newForge>> }> {
  const dirs = tempDirs();
  const forge = await newForge(dirs);
  const info = { name: 'surface', version: '1.0.0' };
  const client =
    era === 'legacy' ? new LegacyClient(info) : new ModernClient(info, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
  if (wire === 'stdio') {
    if (!existsSync(join(PACKAGE_DIR, 'dist/index.js')))
      throw new Error('run `pnpm build` in packages/mcp first: the stdio server runs the build');
    const params = {
      command: process.execPath,
      args: [FIXTURE],
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', FORGE_HOME: dirs.home, FORGE_PROJECT: dirs.project, FORGE_PERSONA: 'alice' },
      stderr: 'pipe' as const,
    };
    await (client as LegacyClient).connect(era === 'legacy' ? new LegacyStdio(params) : (new ModernStdio(params) as never));
  } else {
    const token = 'alice-token-0123456789';
    const server = await serveHttp(forge, { tokens: { [token]: { persona: 'alice' } } });
    onTestFinished(() => server.close());
    const opts = { requestInit: { headers: { authorization: `Bearer ${token}` } } };
    await (client as LegacyClient).connect(
      era === 'legacy' ? new LegacyHttp(new URL(server.url), opts) : (new ModernHttp(new URL(server.url), opts) as never),
    );
  }
  onTestFinished(() => client.close());
  return { client, forge };
}

const PNG_1x1 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

for (const [era, wire] of [
  ['legacy', 'stdio'],
  ['legacy', 'http'],
  ['modern', 'stdio'],
  ['modern', 'http'],
] as const) {
  describe(`${era} era over ${wire}`, () => {
    it('prompts: the guide and the spec drafter; completions for runtimes, scopes and tool names', async () => {
      const { client } = await open(era, wire);
      const prompts = (await client.listPrompts()).prompts.map((p) => p.name);
      expect(prompts).toEqual(['forge_guide', 'forge_draft_tool']);
      const guide = await client.getPrompt({ name: 'forge_guide' });
      const text = (guide.messages[0]?.content as unknown as { text: string } | undefined)?.text;
      expect(text).toContain('Do not forge');
      expect(text).toContain('forge_list');
      const draft = await client.getPrompt({
        name: 'forge_draft_tool',
        arguments: { description: 'count words in a file', runtime: 'node' },
      });
      expect((draft.messages[0]?.content as unknown as { text: string } | undefined)?.text).toContain('count words in a file');
      await expect(client.getPrompt({ name: 'forge_draft_tool', arguments: { runtime: 'node' } })).rejects.toThrow(/description/);
      await expect(client.getPrompt({ name: 'nope' })).rejects.toThrow(/no prompt named "nope"/);

      const runtime = await client.complete({
        ref: { type: 'ref/prompt', name: 'forge_draft_tool' },
        argument: { name: 'runtime', value: 'py' },
      });
      expect(runtime.completion.values).toEqual(['python3']);
      const scope = await client.complete({
        ref: { type: 'ref/prompt', name: 'forge_draft_tool' },
        argument: { name: 'scope', value: 's' },
      });
      expect(scope.completion.values).toEqual(['session']);
      for (const n of ['code.alpha', 'code.beta', 'misc']) {
        const r = await client.callTool({ name: 'forge_tool', arguments: py(n, 'print(json.dumps({"ok": True, "data": 1}))') });
        expect(envelopeOf(r).ok).toBe(true);
      }
      const names = await client.complete({
        ref: { type: 'ref/resource', uri: 'forge://tools/{name}' },
        argument: { name: 'name', value: 'code.' },
      });
      expect(names.completion.values).toEqual(['code.alpha', 'code.beta']);
    });

    it('resources: tool specs (both name forms), templates, the verified audit tail; unknown URIs are named', async () => {
      const { client } = await open(era, wire);
      const r = await client.callTool({ name: 'forge_tool', arguments: py('code.spec_me', 'print(json.dumps({"ok": True, "data": 1}))') });
      expect(envelopeOf(r).ok).toBe(true);
      const list = (await client.listResources()).resources.map((x) => x.uri);
      expect(list).toEqual(expect.arrayContaining(['forge://tools/code.spec_me', 'forge://audit/tail']));
      const templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
      expect(templates).toEqual(['forge://tools/{name}', 'forge://runs/{run_id}/manifest', 'forge://runs/{run_id}/artifacts/{path}']);
      for (const uri of ['forge://tools/code.spec_me', 'forge://tools/code__spec_me']) {
        const spec = await client.readResource({ uri });
        const stored = JSON.parse((spec.contents[0] as { text: string }).text);
        expect(stored).toMatchObject({ name: 'code.spec_me', runtime: 'python3', version: 1 });
      }
      const tail = await client.readResource({ uri: 'forge://audit/tail' });
      const parsed = JSON.parse((tail.contents[0] as { text: string }).text);
      expect(parsed.verdict.ok).toBe(true);
      expect(parsed.entries.map((e: { type: string }) => e.type)).toContain('forge.created');
      await expect(client.readResource({ uri: 'forge://tools/nope' })).rejects.toThrow(/no tool "nope"/);
      await expect(client.readResource({ uri: 'forge://elsewhere' })).rejects.toThrow(/forge has no resource/);
    });

    it('files: meta.files come back as resource links, images inline; the run and its artifacts read back; another persona cannot', async () => {
      const { client, forge } = await open(era, wire);
      const impl = [
        'import base64, json, os, sys',
        'json.load(sys.stdin)',
        `open("/forge/artifacts/dot.png", "wb").write(base64.b64decode("${PNG_1x1}"))`,
        'open("/forge/artifacts/report.csv", "w").write("a,b\\n1,2\\n")',
        'print(json.dumps({"ok": True, "data": {"n": 2}, "meta": {"files": ["dot.png", "/forge/artifacts/report.csv", "missing.txt"]}}))',
      ].join('\n');
      const forged = await client.callTool({
        name: 'forge_tool',
        arguments: { name: 'art.make', description: 'writes files', runtime: 'python3', input_schema: { type: 'object' }, impl },
      });
      expect(envelopeOf(forged).ok).toBe(true);
      const result = (await client.callTool({ name: 'art__make', arguments: {} })) as {
        content: { type: string; uri?: string; name?: string; mimeType?: string; data?: string }[];
      };
      const envelope = envelopeOf(result);
      expect(envelope.ok).toBe(true);
      const runId = envelope.meta.run_id as string;
      const links = result.content.filter((c) => c.type === 'resource_link');
      expect(links.map((l) => [l.name, l.uri, l.mimeType])).toEqual([
        ['dot.png', `forge://runs/${runId}/artifacts/dot.png`, 'image/png'],
        ['report.csv', `forge://runs/${runId}/artifacts/report.csv`, 'text/csv'],
      ]);
      const image = result.content.find((c) => c.type === 'image');
      expect(image).toMatchObject({ mimeType: 'image/png', data: PNG_1x1 });

      const csv = await client.readResource({ uri: `forge://runs/${runId}/artifacts/report.csv` });
      expect((csv.contents[0] as { text: string }).text).toBe('a,b\n1,2\n');
      const png = await client.readResource({ uri: `forge://runs/${runId}/artifacts/dot.png` });
      expect((png.contents[0] as { blob: string }).blob).toBe(PNG_1x1);
      const manifest = await client.readResource({ uri: `forge://runs/${runId}/manifest` });
      expect(JSON.parse((manifest.contents[0] as { text: string }).text)).toMatchObject({ run_id: runId, kind: 'run' });
      await expect(client.readResource({ uri: `forge://runs/${runId}/artifacts/../../etc/passwd` })).rejects.toThrow();

      // Another persona's view of the same run: not found, as for a run that does not exist.
      const other = await forge.readRun(runId, { persona: 'mallory' });
      expect(other).toMatchObject({ ok: false, kind: 'not_found' });
    });

    it('annotations: derived from the sandbox, an override only ever less safe', async () => {
      const { client } = await open(era, wire);
      const ok = 'print(json.dumps({"ok": True, "data": 1}))';
      await client.callTool({ name: 'forge_tool', arguments: py('pure', ok, { meta: { deterministic: true } }) });
      await client.callTool({
        name: 'forge_tool',
        arguments: py('writer', ok, {
          input_schema: { type: 'object', properties: { out: { type: 'string', 'x-bind': 'rw' } } },
          meta: { annotations: { readOnlyHint: true, destructiveHint: false } },
        }),
      });
      const tools = new Map((await client.listTools()).tools.map((t) => [t.name, t]));
      expect(tools.get('pure')?.annotations).toMatchObject({
        readOnlyHint: true,
        destructiveHint: false,
        idempotentHint: true,
        openWorldHint: false,
      });
      // rw bind: not read-only, whatever meta claims.
      expect(tools.get('writer')?.annotations).toMatchObject({ readOnlyHint: false, openWorldHint: false });
    });

    it('events: progress for a caller that sent a progressToken, log lines at their level', async () => {
      const { client } = await open(era, wire);
      const impl = [
        'import json, os, sys, time',
        'json.load(sys.stdin)',
        'fd = int(os.environ["FORGE_EVENTS_FD"])',
        'out = os.fdopen(fd, "w", buffering=1)',
        'for i in (25, 50, 100):',
        '    out.write(json.dumps({"progress": i, "total": 100, "message": f"at {i}"}) + "\\n")',
        '    time.sleep(0.3)',
        'out.write(json.dumps({"log": "warning", "message": "careful", "data": {"k": 1}}) + "\\n")',
        'out.write(json.dumps({"log": "debug", "message": "noise"}) + "\\n")',
        'out.close()',
        'print(json.dumps({"ok": True, "data": 1}))',
      ].join('\n');
      await client.callTool({ name: 'forge_tool', arguments: py('evented', '', { impl }) });
      const logs: { level: string; data: unknown }[] = [];
      if (era === 'legacy') {
        (client as LegacyClient).setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
          logs.push({ level: n.params.level, data: n.params.data });
        });
        await (client as LegacyClient).setLoggingLevel('info');
      } else {
        (client as ModernClient).setNotificationHandler('notifications/message', (n) => {
          logs.push({ level: n.params.level, data: n.params.data });
        });
      }
      const progress: number[] = [];
      const onprogress = (p: { progress: number }) => progress.push(p.progress);
      // The 2026 era has no logging/setLevel: the level rides in the request's _meta.
      const result =
        era === 'legacy'
          ? await (client as LegacyClient).callTool({ name: 'evented', arguments: {} }, undefined, { onprogress })
          : await (client as ModernClient).callTool(
              { name: 'evented', arguments: {}, _meta: { [LOG_LEVEL_META_KEY]: 'info' } },
              { onprogress },
            );
      expect(envelopeOf(result).ok).toBe(true);
      expect(progress).toEqual([25, 50, 100]);
      expect(logs).toEqual([{ level: 'warning', data: { tool: 'evented', message: 'careful', data: { k: 1 } } }]);
    });
  });
}

describe('2025 era: resource subscriptions', () => {
  it('a subscribed tool spec is reported updated when the tool changes; an unsubscribed one is not', async () => {
    const { client } = await open('legacy', 'http');
    const legacy = client as LegacyClient;
    const ok = 'print(json.dumps({"ok": True, "data": 1}))';
    for (const n of ['watched', 'other']) await legacy.callTool({ name: 'forge_tool', arguments: py(n, ok) });
    const updated: string[] = [];
    legacy.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
      updated.push(n.params.uri);
    });
    await legacy.subscribeResource({ uri: 'forge://tools/watched' });
    await legacy.callTool({ name: 'forge_tool', arguments: { ...py('watched', ok), description: 'changed', overwrite: true } });
    await waitFor('a resources/updated notification', () => updated.length > 0, { intervalMs: 100 });
    expect(updated).toContain('forge://tools/watched');
    expect(updated).not.toContain('forge://tools/other');
    // A change to another tool does not report the watched one.
    updated.length = 0;
    await legacy.callTool({ name: 'forge_tool', arguments: { ...py('other', ok), description: 'changed too', overwrite: true } });
    // Lets time pass: no notification is the expected outcome, so there is no event to wait for;
    // half a second is long past the one the watched tool's change took to arrive.
    await new Promise((r) => setTimeout(r, 500));
    expect(updated).toEqual([]);
    await legacy.unsubscribeResource({ uri: 'forge://tools/watched' });
  });
});
