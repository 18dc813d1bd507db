import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { toolValidators } from '@forge/registry';
import { callAuthority } from '../authority.js';
import type { Target } from '../call/resolve.js';
import { callerOf } from '../caller.js';
import { type Envelope, type EnvelopeMeta, failure } from '../envelope.js';
import type { ToolEvent } from '../events.js';
import { DEFAULT_EVENT_LIMITS } from '../events.js';
import type { Executor } from '../executor.js';
import type { ExecutorsPort } from '../ports.js';
import { redactText, redactValue, type SecretList } from '../redact.js';
import { stopReason } from '../refusal.js';
import type { SourceResult } from '../sources.js';

/**
 * The source executor: a call handed to the tool's source (the gateway sends it to the upstream
 * MCP server), within the policy's wall-clock budget and the caller's cancellation. What comes
 * back is redacted by the secret values the call got (an upstream may echo its own credentials),
 * its events too, and an ok answer is checked against the upstream's output schema.
 */

type Sourced = Extract<Target, { kind: 'sourced' }>;

export function sourceExecutor(e: Pick<ExecutorsPort, 'running'>): Executor<Sourced> {
  return {
    async plan(call, target) {
      const { tool } = target;
      return {
        secretNames: tool.meta?.secrets ?? [],
        redactedInput: call.input,
        budget: tool.meta?.timeout_ms !== undefined ? { timeout_ms: tool.meta.timeout_ms } : {},
        tool: {
          name: tool.name,
          digest: tool.digest,
          source: tool.origin.kind,
          server: tool.origin.server,
          upstream_tool: tool.origin.tool,
          transport: tool.origin.transport,
          sandboxed: tool.origin.sandboxed,
        },
      };
    },

    async run(job) {
      const { tool, source } = job.target;
      const { call, secrets } = job;
      const ctx = call.ctx;
      const timeoutMs = job.budget.timeout_ms;
      const ac = new AbortController();
      e.running.add(ac);
      const onAbort = () => ac.abort(ctx.signal?.reason);
      ctx.signal?.addEventListener('abort', onAbort);
      if (ctx.signal?.aborted) ac.abort(ctx.signal.reason);
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        ac.abort(new Error(`the call ran past its ${timeoutMs} ms wall-clock limit`));
      }, timeoutMs);
      const onEvent = ctx.onEvent;
      // An upstream's events are capped per call as a forged tool's are: past the limit they are counted, not delivered.
      const events = { delivered: 0, dropped: 0 };
      const capped = (ev: ToolEvent) => {
        if (events.delivered >= DEFAULT_EVENT_LIMITS.events) return void events.dropped++;
        events.delivered++;
        if (onEvent) deliver(onEvent, ev, secrets);
      };
      // The run's directory holds its manifest, and an empty artifacts directory like any run's.
      mkdirSync(join(job.runDir, 'artifacts'), { recursive: true, mode: 0o700 });
      const t0 = performance.now();
      let res: SourceResult;
      try {
        res = await source.execute({
          ...callerOf(ctx),
          tool,
          input: call.input,
          runId: job.runId,
          secrets: job.secretValues,
          authority: callAuthority(job.snap, ctx.persona),
          signal: ac.signal,
          timeoutMs,
          ...(onEvent ? { onEvent: capped } : {}),
        });
      } catch (err) {
        res = {
          ok: false,
          kind: 'internal',
          message: `the ${source.kind} failed on "${tool.name}": ${(err as Error).message}`,
          outcome: 'failure',
        };
      } finally {
        clearTimeout(timer);
        e.running.delete(ac);
        ctx.signal?.removeEventListener('abort', onAbort);
      }
      const durationMs = Math.round((performance.now() - t0) * 1000) / 1000;
      const label = tool.origin.sandboxed ? `${tool.origin.kind}+bwrap` : `${tool.origin.kind}+unsandboxed`;
      const meta: EnvelopeMeta = { run_id: job.runId, cache: 'off', sandbox: label };
      if (job.clamped.length > 0) meta.policy_clamped = job.clamped;
      let envelope: Envelope;
      let outcome: 'success' | 'failure' | 'none';
      if (timedOut) {
        outcome = 'failure';
        envelope = failure(
          'timeout',
          `"${tool.name}" ran past its ${timeoutMs} ms wall-clock limit; the upstream call was cancelled`,
          meta,
        );
      } else if (ac.signal.aborted) {
        outcome = 'none';
        envelope = failure('cancelled', `${stopReason(ac.signal)}; the upstream call was cancelled`, meta);
      } else if (!res.ok) {
        outcome = res.outcome;
        envelope = failure(res.kind, redactText(res.message, secrets), meta);
      } else {
        outcome = 'success';
        envelope = { ok: true, data: redactValue(res.data, secrets), meta };
        if (tool.output_schema) {
          const validators = toolValidators(tool);
          const out = 'kind' in validators ? undefined : validators.output?.(envelope.data);
          if (out && !out.ok) {
            outcome = 'failure';
            envelope = failure('output_schema_failed', `the upstream's answer does not match its own output schema: ${out.message}`, meta, {
              problems: out.problems,
            });
          }
        }
      }
      envelope.meta.duration_ms = durationMs;
      const facts = res.facts ? (redactValue(res.facts, secrets) as Record<string, unknown>) : {};
      return {
        envelope,
        outcome,
        ran: true,
        durationMs,
        manifest: {
          upstream: {
            server: tool.origin.server,
            tool: tool.origin.tool,
            transport: tool.origin.transport,
            sandboxed: tool.origin.sandboxed,
            ...facts,
          },
          events: { delivered: events.delivered, dropped: { over_limit: events.dropped } },
        },
        audit: { server: tool.origin.server, upstream_tool: tool.origin.tool, sandboxed: tool.origin.sandboxed, duration_ms: durationMs },
      };
    },
  };
}

/** An upstream's event, redacted by the call's secret values, to the caller (whose exceptions are ignored). */
function deliver(onEvent: (ev: ToolEvent) => void, ev: ToolEvent, secrets: SecretList): void {
  try {
    onEvent(secrets.length > 0 ? (redactValue(ev, secrets) as ToolEvent) : ev);
  } catch {
    // the caller's listener failing is not the call's failure
  }
}
