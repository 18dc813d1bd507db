import { createHash } from 'node:crypto';
import { networkFor, type PolicySnapshot } from '@forge/policy';
import { staticCheck, type ToolExample, type ToolSpec } from '@forge/registry';
import type { Envelope, Forge } from '@forge/runner';
import stableStringify from 'fast-json-stable-stringify';
import { matchExpect, sameData } from './expect.js';
import { generateProbes } from './probes.js';
import type { ValidationCheck, ValidationRecord } from './types.js';

/**
 * The validation gate: no human time is spent on a proposal that fails it. In order, stopping
 * at the first failing stage: the static check; every example run in the sandbox and compared
 * with its `expect`; probes generated from the input schema (valid ones must give a well-formed
 * envelope that satisfies the output schema, invalid ones must be refused before anything runs);
 * a deterministic tool answers the same twice; a replacement passes the active version's examples
 * (no regression). Every run is a `Forge.trialCall` under the proposer's persona, so the sandbox,
 * network and secrets are what policy gives that persona, never what the proposal asks.
 */

/** What a validation needs. */
export interface ValidationJob {
  forge: Forge;
  spec: ToolSpec;
  persona: string;
  session: string;
  /** The proposal id (named in each trial run's audit entry). */
  proposal: string;
  snap: PolicySnapshot;
  /** The active version's examples when the proposal replaces a tool. */
  regression?: readonly ToolExample[];
  /** Asked before every run: a reason stops the validation (the kill switch). */
  stopped?: () => string | undefined;
  now?: () => number;
}

/** Error kinds that mean forge found the tool broken, not that the tool refused an input on its own terms. */
const BROKEN = new Set([
  'output_invalid',
  'output_schema_failed',
  'timeout',
  'resource_limit',
  'internal',
  'sandbox_unavailable',
  'cancelled',
  'audit_unavailable',
  'validation_failed',
  'policy_denied',
  'secret_denied',
  'secret_missing',
  'bind_denied',
]);

/** Longest JSON kept of one output in the record. */
const OUTPUT_BYTES = 4096;
/** Trial runs at once (the machine's cores are the limit; the sandbox runs are the cost). */
const PARALLEL = 2;

/** The record of one validation; `ok` when every check passed. */
export async function validateProposal(job: ValidationJob): Promise<ValidationRecord> {
  const now = job.now ?? Date.now;
  const started = now();
  const checks: ValidationCheck[] = [];
  let runs = 0;
  let runtime = job.spec.runtime;
  const done = (): ValidationRecord => {
    const failing = checks.filter((c) => !c.ok);
    return {
      ok: failing.length === 0 && checks.length > 0,
      started_at: new Date(started).toISOString(),
      duration_ms: now() - started,
      sandbox_runs: runs,
      policy_digest: job.snap.digest,
      spec_digest: specDigest(job.spec),
      runtime,
      checks,
      summary:
        failing.length === 0
          ? `passed ${checks.length} checks in ${runs} sandbox runs`
          : failing
              .slice(0, 3)
              .map((c) => `${c.label}: ${c.verdict}`)
              .join('; '),
    };
  };

  // 1. static check (no run)
  const network = networkFor(job.snap, job.persona).network === 'allow';
  const findings = staticCheck(job.spec, { network });
  checks.push(
    findings.length === 0
      ? { kind: 'static', label: 'static check', ok: true, verdict: 'no findings' }
      : {
          kind: 'static',
          label: 'static check',
          ok: false,
          verdict: findings.map((f) => `line ${f.line}: ${f.message} (${f.rule})`).join('; '),
        },
  );
  if (findings.length > 0) return done();

  /** One trial run, or the reason validation stops. */
  const trial = async (input: unknown): Promise<{ envelope: Envelope; ran: boolean; ms: number } | { stop: string }> => {
    const why = job.stopped?.();
    if (why) return { stop: why };
    const t0 = now();
    const r = await job.forge.trialCall(job.spec, input, { persona: job.persona, session: job.session, purpose: job.proposal });
    if ('kind' in r) return { stop: `${r.kind}: ${r.message}` };
    if (r.ran) runs++;
    runtime = r.runtime;
    return { envelope: r.envelope, ran: r.ran, ms: now() - t0 };
  };
  const stage = async (items: readonly (() => Promise<ValidationCheck | { stop: string }>)[]): Promise<boolean> => {
    const out: (ValidationCheck | { stop: string })[] = new Array(items.length);
    let next = 0;
    const worker = async () => {
      while (next < items.length) {
        const i = next++;
        const item = items[i];
        if (item) out[i] = await item();
      }
    };
    await Promise.all(Array.from({ length: Math.min(PARALLEL, items.length) }, worker));
    for (const c of out) {
      if ('stop' in c) {
        checks.push({ kind: 'static', label: 'stopped', ok: false, verdict: `validation stopped: ${c.stop}` });
        return false;
      }
      checks.push(c);
    }
    return out.every((c) => 'ok' in c && c.ok);
  };

  // 2. examples
  const examples = job.spec.examples ?? [];
  const exampleCheck = (ex: ToolExample, label: string, kind: 'example' | 'regression') => async () => {
    const r = await trial(ex.input);
    if ('stop' in r) return r;
    const m = matchExpect(ex.expect, r.envelope);
    const base = { kind, label, input: ex.input, output: bounded(r.envelope), duration_ms: r.ms, ...runIdOf(r.envelope) };
    const withExpect = ex.expect !== undefined ? { expect: ex.expect } : {};
    return m.ok ? { ...base, ...withExpect, ok: true, verdict: 'as expected' } : { ...base, ...withExpect, ok: false, verdict: m.verdict };
  };
  if (!(await stage(examples.map((ex, i) => exampleCheck(ex, `example ${i + 1}`, 'example'))))) return done();

  // 3. probes from the input schema
  const probes = generateProbes(job.spec.input_schema, { examples: examples.map((e) => e.input) });
  const probeCheck = (p: (typeof probes)[number]) => async (): Promise<ValidationCheck | { stop: string }> => {
    const r = await trial(p.input);
    if ('stop' in r) return r;
    const env = r.envelope;
    const base = { label: `probe: ${p.label}`, input: p.input, output: bounded(env), duration_ms: r.ms, ...runIdOf(env) };
    if (!p.valid) {
      const refused = !r.ran && !env.ok && env.error.kind === 'validation_failed';
      return {
        ...base,
        kind: 'probe_invalid',
        ok: refused,
        verdict: refused ? 'refused before anything ran' : `an invalid input was not refused (${env.ok ? 'ok' : env.error.kind})`,
      };
    }
    if (env.ok) return { ...base, kind: 'probe_valid', ok: true, verdict: 'well-formed answer' };
    const broken = BROKEN.has(env.error.kind);
    return {
      ...base,
      kind: 'probe_valid',
      ok: !broken,
      verdict: broken
        ? `a valid input broke the tool: ${env.error.kind}: ${env.error.message.slice(0, 200)}`
        : `refused it on its own terms (${env.error.kind}), a well-formed answer`,
    };
  };
  if (!(await stage(probes.map(probeCheck)))) return done();

  // 4. determinism: the same input twice gives the same data
  const first = examples[0] ?? probes.find((p) => p.valid);
  if (job.spec.meta?.deterministic === true && first) {
    const input = first.input;
    const again = async (): Promise<ValidationCheck | { stop: string }> => {
      const a = await trial(input);
      if ('stop' in a) return a;
      const b = await trial(input);
      if ('stop' in b) return b;
      const same =
        a.envelope.ok === b.envelope.ok &&
        sameData(a.envelope.ok ? a.envelope.data : a.envelope.error.kind, b.envelope.ok ? b.envelope.data : b.envelope.error.kind);
      return {
        kind: 'determinism',
        label: 'determinism',
        input,
        ok: same,
        verdict: same ? 'the same answer twice' : `two runs of the same input differ: ${short(a.envelope)} then ${short(b.envelope)}`,
        output: bounded(b.envelope),
      };
    };
    if (!(await stage([again]))) return done();
  }

  // 5. no regression: the active version's examples still pass
  const old = job.regression ?? [];
  await stage(old.map((ex, i) => exampleCheck(ex, `regression: example ${i + 1} of the active version`, 'regression')));
  return done();
}

/** `sha256:` over the canonical JSON of a spec: what was validated, proposed and approved. */
export function specDigest(spec: ToolSpec): string {
  return `sha256:${createHash('sha256').update(stableStringify(spec)).digest('hex')}`;
}

function runIdOf(env: Envelope): { run_id?: string } {
  const id = env.meta?.run_id;
  return typeof id === 'string' ? { run_id: id } : {};
}

function short(env: Envelope): string {
  const t = env.ok ? stableStringify(env.data ?? null) : `${env.error.kind}`;
  return t.length > 100 ? `${t.slice(0, 100)}…` : t;
}

/** The envelope as the record keeps it: at most 4 KiB of JSON, else cut and marked. */
function bounded(env: Envelope): unknown {
  const text = JSON.stringify(env);
  if (text.length <= OUTPUT_BYTES) return env;
  return { truncated: true, bytes: text.length, head: text.slice(0, OUTPUT_BYTES) };
}
