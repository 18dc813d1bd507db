/**
 * One OpenTelemetry span per MCP request the server answers, as OpenTelemetry's MCP conventions
 * name it (`{mcp.method.name} {target}`, kind server), continuing the trace the client put in
 * `params._meta` (`traceparent`, `tracestate`). The handler runs in that span's context, so the
 * runner's `execute_tool` span of a tools/call is its child and a dispatched call or a gateway
 * upstream carries the same trace on. With no tracer provider registered nothing records and the
 * handler runs as it would without (the API is loaded only once something registered with it).
 *
 * Attributes are the method, the request id, the session, the protocol version and the target's
 * name (tool, prompt, resource URI): never arguments or results.
 */
import { extractTrace, telemetryApi } from '@forge/runner';
import type { Tracer } from '@opentelemetry/api';
// Inlined by the build: nothing is read from disk at run time.
import packageJson from '../package.json' with { type: 'json' };

let tracer: Tracer | undefined;
/** The longest name, URI or id a span takes from a request. */
const MAX_ATTRIBUTE = 256;

/** What a request looks like to the span: its params (for the target) and its context. */
interface RequestFacts {
  request: { params?: Record<string, unknown> };
  id: string | number | undefined;
  meta: unknown;
  sessionId: string | undefined;
  protocolVersion: string | undefined;
}

/** Runs the handler of `method` under its request span. */
export function traceRequest<T>(method: string, facts: RequestFacts, run: () => Promise<T>): Promise<T> {
  // Nothing registered with OpenTelemetry: nothing to do (the API is not even loaded).
  const api = telemetryApi();
  if (!api) return run();
  tracer ??= api.trace.getTracer('@forge/mcp', packageJson.version);
  const params = facts.request.params ?? {};
  // What a client wrote is cut short: a span is not where a megabyte of name goes.
  const short = (v: string) => (v.length > MAX_ATTRIBUTE ? `${v.slice(0, MAX_ATTRIBUTE)}…` : v);
  const attributes: Record<string, string> = { 'mcp.method.name': method };
  let target: string | undefined;
  if (method === 'tools/call' && typeof params.name === 'string') {
    target = short(params.name);
    attributes['gen_ai.tool.name'] = target;
    attributes['gen_ai.operation.name'] = 'execute_tool';
  } else if (method === 'prompts/get' && typeof params.name === 'string') {
    target = short(params.name);
    attributes['gen_ai.prompt.name'] = target;
  } else if (typeof params.uri === 'string') attributes['mcp.resource.uri'] = short(params.uri);
  if (facts.id !== undefined) attributes['jsonrpc.request.id'] = short(String(facts.id));
  if (facts.sessionId) attributes['mcp.session.id'] = facts.sessionId;
  if (facts.protocolVersion) attributes['mcp.protocol.version'] = facts.protocolVersion;
  const parent = extractTrace(facts.meta) ?? api.context.active();
  const span = tracer.startSpan(target ? `${method} ${target}` : method, { kind: api.SpanKind.SERVER, attributes }, parent);
  if (!span.isRecording()) return run();
  return api.context.with(api.trace.setSpan(parent, span), run).then(
    (result) => {
      // A tool's failure is a result, not a JSON-RPC error: the conventions call it tool_error.
      if ((result as { isError?: unknown } | undefined)?.isError === true) {
        span.setAttribute('error.type', 'tool_error');
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: 'tool_error' });
      }
      span.end();
      return result;
    },
    (err: unknown) => {
      const code = (err as { code?: unknown })?.code;
      span.setAttribute('error.type', typeof code === 'number' ? String(code) : ((err as Error)?.name ?? 'Error'));
      if (typeof code === 'number') span.setAttribute('rpc.response.status_code', String(code));
      span.setStatus({ code: api.SpanStatusCode.ERROR, message: (err as Error)?.message });
      span.end();
      throw err;
    },
  );
}
