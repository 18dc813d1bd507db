// OpenTelemetry: `forge serve` configured by OTEL_* exports its spans to a real OTLP/HTTP receiver
// on loopback. A client's traceparent in _meta is continued: the MCP request span (server kind)
// and under it the runner's execute_tool span, which names the call's audit entry and run.
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { waitFor } from '@forge/test-utils';
import { describe, expect, it, onTestFinished } from 'vitest';
import { telemetryChoice } from '../src/telemetry.js';
import { connect, exampleSpec, py, requireCliAndSandbox, rugGateway, runCli, type Scratch, scratch, startWorker } from './helpers.js';

interface Received {
  contentType: string;
  body: Buffer;
}

/** An OTLP/HTTP receiver on loopback: every POST to /v1/traces, answered 200 as a collector does. */
async function receiver(): Promise<{ url: string; received: Received[] }> {
  const received: Received[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/v1/traces')
        received.push({ contentType: String(req.headers['content-type']), body: Buffer.concat(chunks) });
      const json = String(req.headers['content-type']).includes('json');
      res.writeHead(200, { 'content-type': json ? 'application/json' : 'application/x-protobuf' });
      res.end(json ? '{}' : '');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received };
}

interface Span {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: { key: string; value: Record<string, unknown> }[];
  events?: { name: string; attributes: { key: string; value: Record<string, unknown> }[] }[];
  status?: { code?: number };
}

/** Every span of the JSON exports received so far. */
function spans(received: Received[]): Span[] {
  const out: Span[] = [];
  for (const r of received) {
    const doc = JSON.parse(r.body.toString('utf8')) as { resourceSpans: { scopeSpans: { spans: Span[] }[] }[] };
    for (const rs of doc.resourceSpans) for (const ss of rs.scopeSpans) out.push(...ss.spans);
  }
  return out;
}

function attr(span: Span, key: string): unknown {
  const v = span.attributes.find((a) => a.key === key)?.value;
  return v && (v.stringValue ?? v.intValue ?? v.boolValue ?? v.doubleValue);
}

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT_ID = '00f067aa0ba902b7';
const MARKER = 'input-marker-7f3a';

function otelEnv(url: string, protocol: string): Record<string, string> {
  return {
    OTEL_EXPORTER_OTLP_ENDPOINT: url,
    OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
    OTEL_SERVICE_NAME: 'forge-under-test',
    // Exported as they end (the test waits for them, not for a batch to fill).
    OTEL_BSP_SCHEDULE_DELAY: '50',
  };
}

async function auditEntries(s: Scratch): Promise<{ seq: number; type: string; data: Record<string, unknown> }[]> {
  const r = await runCli(['audit', 'tail', '--json', '-n', '1000'], { cwd: s.project, env: s.env });
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout);
}

describe('OpenTelemetry', () => {
  it('continues the client trace: the MCP span, then execute_tool naming the audit entry and the run', async () => {
    await requireCliAndSandbox();
    const s = scratch();
    const otlp = await receiver();
    const c = await connect(s, { env: otelEnv(otlp.url, 'http/json') });
    const forged = await c.call('forge_tool', py('code.echo', 'print(json.dumps({"ok": True, "data": args}))'));
    expect(forged.env.ok, JSON.stringify(forged.env)).toBe(true);
    const meta = { traceparent: `00-${TRACE_ID}-${PARENT_ID}-01` };
    const ok = await c.client.callTool({ name: 'code__echo', arguments: { secret_ish: MARKER }, _meta: meta });
    expect(ok.isError).toBeFalsy();
    const missing = await c.client.callTool({ name: 'no_such_tool', arguments: {}, _meta: meta });
    expect(missing.isError).toBe(true);

    const ours = () => spans(otlp.received).filter((x) => x.traceId === TRACE_ID);
    await waitFor('the spans of the two traced tool calls', () => ours().filter((x) => x.name.startsWith('execute_tool')).length >= 2);

    const server = ours().find((x) => x.name === 'tools/call code__echo' && x.parentSpanId === PARENT_ID);
    if (!server) throw new Error(`no server span: ${JSON.stringify(ours().map((x) => x.name))}`);
    expect(server.kind).toBe(2); // SERVER
    expect(attr(server, 'mcp.method.name')).toBe('tools/call');
    expect(attr(server, 'gen_ai.tool.name')).toBe('code__echo');
    expect(attr(server, 'jsonrpc.request.id')).toBeTypeOf('string');

    const exec = ours().find((x) => x.name === 'execute_tool code.echo' && x.parentSpanId === server.spanId);
    if (!exec) throw new Error(`no execute_tool span under the server span: ${JSON.stringify(ours())}`);
    expect(attr(exec, 'gen_ai.operation.name')).toBe('execute_tool');
    expect(attr(exec, 'gen_ai.tool.name')).toBe('code.echo');
    const runId = attr(exec, 'forge.run.id');
    const index = Number(attr(exec, 'forge.audit.index'));
    expect(runId).toBeTypeOf('string');
    // The span's audit index is the call's own entry, which names the same run.
    const entries = await auditEntries(s);
    const entry = entries.find((e) => e.seq === index);
    expect(entry).toMatchObject({ type: 'forge.called', data: { name: 'code.echo', run_id: runId, ok: true } });

    // The unknown tool: refused, its kind on the span, its refusal entry named.
    const refused = ours().find((x) => x.name === 'execute_tool no_such_tool');
    if (!refused) throw new Error(`no span of the refused call: ${JSON.stringify(ours().map((x) => x.name))}`);
    expect(attr(refused, 'error.type')).toBe('unknown_tool');
    expect(refused.status?.code).toBe(2); // ERROR
    expect(entries.find((e) => e.seq === Number(attr(refused, 'forge.audit.index')))?.data).toMatchObject({ name: 'no_such_tool' });

    // Never the input: nothing exported carries it.
    for (const r of otlp.received) expect(r.body.toString('utf8')).not.toContain(MARKER);
    // The resource says who exported it.
    expect(otlp.received[0]?.body.toString('utf8')).toContain('forge-under-test');
  });

  it('exports OTLP/HTTP protobuf by default, and flushes what is left when the server exits', async () => {
    await requireCliAndSandbox();
    const s = scratch();
    const otlp = await receiver();
    const env = otelEnv(otlp.url, '');
    delete (env as Record<string, string | undefined>).OTEL_EXPORTER_OTLP_PROTOCOL;
    env.OTEL_BSP_SCHEDULE_DELAY = '600000'; // only the exit's flush exports them
    const c = await connect(s, { env });
    await c.client.listTools();
    await c.client.close();
    await waitFor('a protobuf export at exit', () => otlp.received.length > 0);
    expect(otlp.received[0]?.contentType).toBe('application/x-protobuf');
    expect(otlp.received[0]?.body.includes(Buffer.from('tools/list'))).toBe(true);
  });
});

describe('OpenTelemetry across processes', () => {
  it("a dispatched call: the worker's execute_tool span is a child of the front-end's, and names its entry", async () => {
    await requireCliAndSandbox();
    const s = scratch();
    const otlp = await receiver();
    const env = { ...s.env, ...otelEnv(otlp.url, 'http/json') };
    const o = { cwd: s.project, env, timeoutMs: 120_000 };
    expect((await runCli(['tools', 'forge', '-'], { ...o, input: JSON.stringify(exampleSpec('fib')) })).code).toBe(0);
    await startWorker(s, env);
    const r = await runCli(['tools', 'call', 'fib', '{"n":10}', '--dispatch'], o);
    expect(r.code, r.stderr).toBe(0);

    const execs = () => spans(otlp.received).filter((x) => x.name === 'execute_tool fib');
    // The worker exports as its spans end; the front-end at its exit.
    const [front, back] = await waitFor('both execute_tool spans of the dispatched call', () => {
      const all = execs();
      const f = all.find((x) => x.parentSpanId === undefined || x.parentSpanId === '');
      const b = f && all.find((x) => x.parentSpanId === f.spanId);
      return f && b ? ([f, b] as const) : undefined;
    });
    expect(back.traceId).toBe(front.traceId);
    const entries = await auditEntries(s);
    const called = entries.find((e) => e.type === 'forge.called');
    expect(attr(back, 'forge.call.id')).toBe(called?.data.call_id);
    expect(Number(attr(back, 'forge.audit.index'))).toBe(called?.seq);
    expect(attr(back, 'forge.run.id')).toBe(called?.data.run_id);
  });

  it('a gateway call carries the trace to its upstream in params._meta', async () => {
    await requireCliAndSandbox();
    const s = scratch();
    const otlp = await receiver();
    rugGateway(s);
    const metaFile = join(s.root, 'upstream-meta.jsonl');
    const config = JSON.parse(readFileSync(join(s.home, 'gateway.json'), 'utf8'));
    config.servers.rug.env.HELLO_META_FILE = metaFile;
    writeFileSync(join(s.home, 'gateway.json'), JSON.stringify(config));
    const env = { ...s.env, ...otelEnv(otlp.url, 'http/json') };
    const o = { cwd: s.project, env, timeoutMs: 60_000 };
    expect((await runCli(['gateway', 'approve', 'rug', 'hello'], o)).code).toBe(0);
    const r = await runCli(['run', 'rug.hello', '--name', 'bob'], o);
    expect(r.code, r.stderr).toBe(0);
    const exec = await waitFor('the execute_tool span of rug.hello', () =>
      spans(otlp.received).find((x) => x.name === 'execute_tool rug.hello'),
    );
    const sent = JSON.parse(readFileSync(metaFile, 'utf8').trim().split('\n').at(-1) as string) as { traceparent?: string };
    expect(sent.traceparent).toBe(`00-${exec.traceId}-${exec.spanId}-01`);
  });
});

describe('telemetryChoice', () => {
  it('is off unless OTEL_* asks, and says why it cannot do what it cannot', () => {
    expect(telemetryChoice({})).toEqual({ on: false });
    expect(telemetryChoice({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x' })).toEqual({ on: true, protocol: 'http/protobuf' });
    expect(telemetryChoice({ OTEL_TRACES_EXPORTER: 'otlp' })).toEqual({ on: true, protocol: 'http/protobuf' });
    expect(telemetryChoice({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json' })).toEqual({
      on: true,
      protocol: 'http/json',
    });
    expect(telemetryChoice({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x', OTEL_SDK_DISABLED: 'true' })).toEqual({ on: false });
    expect(telemetryChoice({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x', OTEL_TRACES_EXPORTER: 'none' })).toEqual({ on: false });
    expect(telemetryChoice({ OTEL_TRACES_EXPORTER: 'zipkin' })).toMatchObject({ on: false, warning: expect.stringContaining('otlp only') });
    expect(telemetryChoice({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toMatchObject({
      on: false,
      warning: expect.stringContaining('http/protobuf or http/json'),
    });
  });
});
