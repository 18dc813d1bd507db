/**
 * OpenTelemetry traces, configured by the standard `OTEL_*` variables. Off unless asked for:
 * `OTEL_TRACES_EXPORTER=otlp`, or an OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`,
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) with no exporter named; `OTEL_SDK_DISABLED=true` and
 * `OTEL_TRACES_EXPORTER=none` keep it off. Off, neither the SDK nor the API is loaded: the
 * packages load the API only once something registered with it (runner's telemetry.ts).
 *
 * On, a tracer provider with a batch processor and the OTLP/HTTP exporter is registered
 * (`OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`: `http/protobuf`, the default, or `http/json`; the
 * endpoint, headers, timeout, `OTEL_BSP_*`, `OTEL_TRACES_SAMPLER*`, `OTEL_SERVICE_NAME` and
 * `OTEL_RESOURCE_ATTRIBUTES` are read by the SDK as it documents), with W3C trace context as the
 * propagator. What it exports is the spans of @forge/mcp and @forge/runner (see docs/telemetry.md).
 */
import { VERSION } from './version.js';

/** A started tracer provider: `shutdown()` exports what is still buffered (bounded in time). */
export interface Telemetry {
  shutdown(): Promise<void>;
}

/** Why telemetry is off, or how it is to be exported. */
export type TelemetryChoice = { on: false; warning?: string } | { on: true; protocol: 'http/protobuf' | 'http/json' };

/** What the `OTEL_*` variables of `env` ask for. */
export function telemetryChoice(env: NodeJS.ProcessEnv): TelemetryChoice {
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return { on: false };
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((x) => x.trim().toLowerCase())
    .filter((x) => x !== '');
  const endpoint = Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
  if (exporters.includes('none')) return { on: false };
  if (exporters.length > 0 && !exporters.includes('otlp'))
    return {
      on: false,
      warning: `OTEL_TRACES_EXPORTER=${env.OTEL_TRACES_EXPORTER}: forge exports traces with otlp only; set OTEL_TRACES_EXPORTER=otlp (or unset it) to export them`,
    };
  if (exporters.length === 0 && !endpoint) return { on: false };
  const protocol = (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL || 'http/protobuf').trim();
  if (protocol !== 'http/protobuf' && protocol !== 'http/json')
    return {
      on: false,
      warning: `OTEL_EXPORTER_OTLP_PROTOCOL=${protocol}: forge exports OTLP over HTTP only; set it to http/protobuf or http/json`,
    };
  return { on: true, protocol };
}

/** How long an exit waits for the last spans to be exported. */
const SHUTDOWN_MS = 5000;

/** Starts tracing when `env` asks for it (a warning on stderr when it asks for what forge cannot do). */
export async function startTelemetry(env: NodeJS.ProcessEnv): Promise<Telemetry | undefined> {
  const choice = telemetryChoice(env);
  if (!choice.on) {
    if (choice.warning) process.stderr.write(`forge: telemetry off: ${choice.warning}\n`);
    return undefined;
  }
  const [{ NodeTracerProvider, BatchSpanProcessor }, { resourceFromAttributes, detectResources, envDetector }] = await Promise.all([
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/resources'),
  ]);
  const exporter =
    choice.protocol === 'http/json'
      ? new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter()
      : new (await import('@opentelemetry/exporter-trace-otlp-proto')).OTLPTraceExporter();
  const resource = resourceFromAttributes({ 'service.name': 'forge', 'service.version': VERSION }).merge(
    detectResources({ detectors: [envDetector] }),
  );
  const provider = new NodeTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(exporter)] });
  provider.register();
  return {
    async shutdown() {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<void>((resolve) => {
        timer = setTimeout(() => {
          process.stderr.write(`forge: telemetry: the last spans were not exported within ${SHUTDOWN_MS} ms; exiting without them\n`);
          resolve();
        }, SHUTDOWN_MS);
      });
      await Promise.race([provider.shutdown().catch(() => {}), late]);
      clearTimeout(timer);
    },
  };
}
