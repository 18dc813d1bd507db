import { createPublicKey } from 'node:crypto';
import { isOperator } from '@forge/policy';
import type { CallContext } from './api.js';
import { AUDIT_UNAVAILABLE } from './auditGate.js';
import { type AuditTail, readAuditTail } from './auditTail.js';
import type { AuditPort, Callers, Lifecycle, PolicyPort, RunsPort, Setup } from './ports.js';
import type { Refusal } from './refusal.js';
import { type ArtifactContent, type RunReadDeps, type RunRecord, readArtifact, readRun } from './runs.js';

/**
 * The engine's reads for a caller: a run and its artifacts (runs.ts), and the audit log's tail
 * (auditTail.ts), each refused while forge closes, while the log takes no appends, and for ids
 * that are unusable.
 */

/** The ports of the reads: who calls, the run store, the policy (operators), the log. */
export type ReadPorts = Pick<Callers, 'context' | 'contextProblem'> &
  Pick<Lifecycle, 'state'> &
  Pick<AuditPort, 'auditGate' | 'record' | 'audit' | 'signingKey'> &
  Pick<RunsPort, 'runs'> &
  PolicyPort &
  Pick<Setup, 'paths'>;

/** What runs.ts needs to serve `c`'s reads, or why `c` cannot read now. */
async function readDeps(e: ReadPorts, c: CallContext): Promise<RunReadDeps | Refusal> {
  const ctx = e.context(c);
  if (e.state.closing) return { ok: false, kind: 'internal', message: 'forge is shutting down; try again after it restarts' };
  const down = await e.auditGate.ready();
  if (down) return { ok: false, kind: AUDIT_UNAVAILABLE, message: down.message };
  const bad = e.contextProblem(ctx);
  if (bad) return { ok: false, kind: 'validation_failed', message: bad };
  return {
    runs: e.runs,
    persona: ctx.persona,
    session: ctx.session,
    policy: e.policyNow,
    hitsWritten: () => e.state.hitsWritten,
    refused: (data) => e.record('run.read_refused', data),
  };
}

/** `Forge.readRun`. */
export async function readRunFor(e: ReadPorts, runId: string, c: CallContext): Promise<RunRecord | Refusal> {
  const deps = await readDeps(e, c);
  return 'ok' in deps ? deps : readRun(deps, runId);
}

/** `Forge.readArtifact`. */
export async function readArtifactFor(
  e: ReadPorts,
  runId: string,
  path: string,
  c: CallContext & { maxBytes?: number },
): Promise<ArtifactContent | Refusal> {
  const deps = await readDeps(e, c);
  return 'ok' in deps ? deps : readArtifact(deps, runId, path, c.maxBytes !== undefined ? { maxBytes: c.maxBytes } : {});
}

/** `Forge.auditTail`: every entry for an operator persona, else only the caller's persona's. */
export async function auditTailFor(e: ReadPorts, o: CallContext & { last?: number }): Promise<AuditTail | Refusal> {
  const deps = await readDeps(e, o);
  if ('ok' in deps) return deps;
  const pol = e.policyNow();
  if (!pol.ok) return pol;
  await e.audit.flush();
  return readAuditTail({
    log: e.paths.auditLog,
    last: o.last ?? 50,
    ...(isOperator(pol.snap, deps.persona) ? {} : { persona: deps.persona }),
    ...(e.signingKey ? { publicKey: createPublicKey(e.signingKey) } : {}),
  });
}
