/**
 * OpenTelemetry spans of tool executions (the GenAI conventions' `execute_tool` span), through
 * the OpenTelemetry API only. Until something registers with the API (a tracer provider, a
 * propagator: `forge` does when `OTEL_*` asks for it, an embedding host with its own SDK) the API
 * is not even loaded (it costs a process some 30 ms to load) and a call runs as it would without;
 * after, a span that does not record (a trace not sampled) costs one check.
 *
 * Each span names the call's audit entry (`forge.audit.index`, and every entry written under it as
 * an event) and its run (`forge.run.id`), so a trace joins the audit log. It never carries the
 * input, the output or a secret: the tool's name, the caller's persona, the outcome and the
 * error kind only.
 */
import { createRequire } from 'node:module';
import type * as Api from '@opentelemetry/api';
import type { Context, Span } from '@opentelemetry/api';
// Inlined by the build: nothing is read from disk at run time.
import packageJson from '../package.json' with { type: 'json' };
import type { Envelope } from './envelope.js';

/** Where the OpenTelemetry API (every copy of major version 1) keeps what was registered with it. */
const API_GLOBAL = Symbol.for('opentelemetry.js.api.1');

/** The API and what this package made of it, once loaded. */
export interface Otel {
  api: typeof Api;
  tracer: Api.Tracer;
  callTrace: symbol;
}
let loaded: Otel | undefined;

/**
 * The OpenTelemetry API, once something registered with it; undefined before (nothing is loaded).
 * Front-ends and sources go through the helpers here, so they load nothing either.
 */
export function otel(): Otel | undefined {
  if (loaded) return loaded;
  if ((globalThis as Record<symbol, unknown>)[API_GLOBAL] === undefined) return undefined;
  const api = createRequire(import.meta.url)('@opentelemetry/api') as typeof Api;
  loaded = { api, tracer: api.trace.getTracer('@forge/runner', packageJson.version), callTrace: api.createContextKey('forge.call-trace') };
  return loaded;
}

/** The GenAI and forge attribute names of a tool execution span. */
export const SPAN_ATTRIBUTES = {
  operation: 'gen_ai.operation.name',
  toolName: 'gen_ai.tool.name',
  toolType: 'gen_ai.tool.type',
  toolCallId: 'gen_ai.tool.call.id',
  errorType: 'error.type',
  auditIndex: 'forge.audit.index',
  auditType: 'forge.audit.type',
  runId: 'forge.run.id',
  callId: 'forge.call.id',
  persona: 'forge.persona',
  cache: 'forge.cache',
} as const;

/** What the span of one call learns while the call runs: the entries written under it. */
export class CallTrace {
  readonly span: Span;
  readonly #entries: { type: string; index: number }[] = [];

  constructor(span: Span) {
    this.span = span;
  }

  /** An entry of the call is durable at `index`. */
  entry(type: string, index: number): void {
    this.#entries.push({ type, index });
    this.span.addEvent('forge.audit.entry', { [SPAN_ATTRIBUTES.auditType]: type, [SPAN_ATTRIBUTES.auditIndex]: index });
  }

  /** The index of the call's own entry (of `type`), else of the last one written under it. */
  indexOf(type: string): number | undefined {
    return (this.#entries.find((e) => e.type === type) ?? this.#entries.at(-1))?.index;
  }
}

/** The call whose span is active here (an audit entry written now belongs to it), if one records. */
export function activeCallTrace(): CallTrace | undefined {
  const o = otel();
  return o && (o.api.context.active().getValue(o.callTrace) as CallTrace | undefined);
}

/** What {@link traceCall} knows of the call when it is answered. */
export interface TracedCall {
  envelope: Envelope;
  /** The forge name the call resolved to (the name asked until it resolved). */
  name: string;
  /** The call's own audit entry type (`forge.called`, `gateway.called`). */
  eventType: string;
  callId?: string;
}

/**
 * Runs one call under an `execute_tool <name>` span (a child of the active context: the MCP
 * request's, or the one a job carried), ending it with the outcome once the call is answered.
 */
export function traceCall<T>(
  asked: string,
  persona: string,
  parentContext: Context | undefined,
  run: () => Promise<T>,
  ended: (result: T) => TracedCall,
): Promise<T> {
  const o = otel();
  if (!o) return run();
  const { api } = o;
  const parent = parentContext ?? api.context.active();
  const span = o.tracer.startSpan(
    `execute_tool ${asked}`,
    {
      kind: api.SpanKind.INTERNAL,
      attributes: {
        [SPAN_ATTRIBUTES.operation]: 'execute_tool',
        [SPAN_ATTRIBUTES.toolName]: asked,
        [SPAN_ATTRIBUTES.toolType]: 'function',
        [SPAN_ATTRIBUTES.persona]: persona,
      },
    },
    parent,
  );
  // Nothing records (no provider, or this trace is not sampled): the call runs as it would without.
  if (!span.isRecording()) return run();
  const calls = new CallTrace(span);
  return api.context.with(api.trace.setSpan(parent, span).setValue(o.callTrace, calls), run).then(
    (result) => {
      const { envelope, name, eventType, callId } = ended(result);
      if (name !== asked) {
        span.updateName(`execute_tool ${name}`);
        span.setAttribute(SPAN_ATTRIBUTES.toolName, name);
      }
      const runId = envelope.meta.run_id;
      if (runId) span.setAttributes({ [SPAN_ATTRIBUTES.runId]: runId, [SPAN_ATTRIBUTES.toolCallId]: runId });
      if (callId) span.setAttribute(SPAN_ATTRIBUTES.callId, callId);
      if (envelope.meta.cache) span.setAttribute(SPAN_ATTRIBUTES.cache, envelope.meta.cache);
      const index = calls.indexOf(eventType);
      if (index !== undefined) span.setAttribute(SPAN_ATTRIBUTES.auditIndex, index);
      if (!envelope.ok) {
        span.setAttribute(SPAN_ATTRIBUTES.errorType, envelope.error.kind);
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: envelope.error.kind });
      }
      span.end();
      return result;
    },
    (err: unknown) => {
      span.setAttribute(SPAN_ATTRIBUTES.errorType, (err as Error)?.name ?? 'Error');
      span.setStatus({ code: api.SpanStatusCode.ERROR, message: (err as Error)?.message });
      span.end();
      throw err;
    },
  );
}

/** W3C trace context as a job or a request's `_meta` carries it. */
export interface TraceCarrier {
  traceparent?: string;
  tracestate?: string;
}

/** The active trace context as W3C fields (empty when nothing records or no propagator is set). */
export function injectTrace(): TraceCarrier {
  const o = otel();
  if (!o) return {};
  const carrier: Record<string, string> = {};
  o.api.propagation.inject(o.api.context.active(), carrier);
  const out: TraceCarrier = {};
  if (typeof carrier.traceparent === 'string') out.traceparent = carrier.traceparent;
  if (typeof carrier.tracestate === 'string') out.tracestate = carrier.tracestate;
  return out;
}

/**
 * The OpenTelemetry API once something registered with it (a tracer provider, a propagator),
 * else undefined, without loading it: what a front-end's own spans go through.
 */
export function telemetryApi(): typeof Api | undefined {
  return otel()?.api;
}

/**
 * The context `carrier`'s W3C fields name (strings only), over the active one (or over none:
 * `root`, for work that continues only the trace it was handed); undefined while nothing is registered.
 */
export function extractTrace(carrier: unknown, over: 'active' | 'root' = 'active'): Context | undefined {
  const o = otel();
  if (!o) return undefined;
  const ctx = over === 'root' ? o.api.ROOT_CONTEXT : o.api.context.active();
  if (!carrier || typeof carrier !== 'object') return ctx;
  const c = carrier as Record<string, unknown>;
  const fields: Record<string, string> = {};
  if (typeof c.traceparent === 'string' && c.traceparent.length <= 256) fields.traceparent = c.traceparent;
  if (typeof c.tracestate === 'string' && c.tracestate.length <= 512) fields.tracestate = c.tracestate;
  return fields.traceparent ? o.api.propagation.extract(ctx, fields) : ctx;
}
