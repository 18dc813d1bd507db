/**
 * The toolsmith: capability gaps become proposals, proposals are validated in the sandbox, a
 * listed approver approves, and only then does a tool go live. Every step re-reads the policy
 * (`toolsmith.enabled`, the `paused` kill switch) and every transition is a `toolsmith.*` entry
 * of forge's audit log. The steps live in their own modules (intake, propose, review, decisions,
 * liveTools) over one `ToolsmithContext` built here.
 */
import type { Refusal } from '@forge/runner';
import type { ToolsmithContext } from './context.js';
import type { Toolsmith, ToolsmithOptions } from './contract.js';
import { DamagedProposals } from './damagedProposals.js';
import { approveProposal, rejectProposal } from './decisions.js';
import { type FileGapStore, openGapStore } from './gaps.js';
import { PolicyGate } from './gate.js';
import { gapSummary, noteUnknownTool, requestTool, runCycle, watchServiceGaps } from './intake.js';
import { retireTool, rollbackTool } from './liveTools.js';
import { type FileProposalStore, openProposalStore } from './proposals.js';
import { proposeTool } from './propose.js';
import { showProposal } from './review.js';
import type { GapStore, ProposalStore } from './stores.js';

/**
 * Creates the toolsmith of `forge`'s project over the stores given, or the file stores under
 * `dir`. Nothing is written until a gap or proposal is. `gapSummary()` answers at once when the
 * gap store does (the file store), else with a promise.
 */
export function createToolsmith<G extends GapStore = FileGapStore, P extends ProposalStore = FileProposalStore>(
  o: ToolsmithOptions<G, P>,
): Toolsmith<G, P> {
  const { forge } = o;
  const now = o.now ?? Date.now;
  const warn = o.onWarning ?? ((m: string) => process.emitWarning(`forge toolsmith: ${m}`));
  const dir = o.dir ?? forge.paths.toolsmithDir;
  const policyMax = (() => {
    const p = forge.policy();
    return p.ok ? p.snapshot.policy.toolsmith.gap_store_max : 10_000;
  })();
  const ownGaps = o.gapStore === undefined;
  const gaps = (o.gapStore ?? openGapStore({ dir, maxRecords: policyMax, now, onError: (err) => warn(err.message) })) as G;
  const damaged = new DamagedProposals(warn);
  const proposals = (o.proposalStore ?? openProposalStore({ dir, now: () => new Date(now()), onProblem: damaged.onProblem })) as P;
  const record = async (type: string, data: Record<string, unknown>): Promise<Refusal | undefined> =>
    forge.recordEvent(`toolsmith.${type}`, data);
  const ctx: ToolsmithContext = {
    forge,
    gaps,
    proposals,
    now,
    warn,
    gate: new PolicyGate(forge, record),
    damaged,
    proposedBy: new Map(),
    record,
    activeTool: async (name) => (await forge.listTools({ scope: 'project' })).find((t) => t.tool.name === name)?.tool,
  };
  const unsubscribe = watchServiceGaps(ctx);
  return {
    gaps,
    proposals,
    unknownTool: (name, caller) => noteUnknownTool(ctx, name, caller),
    request: guarded('request', (args, callCtx) => requestTool(ctx, args, callCtx)),
    propose: guarded('propose', (args, callCtx) => proposeTool(ctx, args, callCtx)),
    list: (filter = {}) => proposals.list(filter),
    get: (id) => proposals.get(id),
    show: guarded('show', (id) => showProposal(ctx, id)),
    approve: guarded('approve', (id, op) => approveProposal(ctx, id, op)),
    reject: guarded('reject', (id, op) => rejectProposal(ctx, id, op)),
    retire: guarded('retire', (name, op) => retireTool(ctx, name, op)),
    rollback: guarded('rollback', (name, op) => rollbackTool(ctx, name, op)),
    gapSummary: () => gapSummary(ctx),
    cycle: guarded('cycle', () => runCycle(ctx)),
    status: (persona) => ctx.gate.status(persona),
    async close() {
      unsubscribe();
      // A store given to createToolsmith stays the caller's to close; its pending notes are flushed.
      if (ownGaps) await gaps.close();
      else await gaps.flush();
    },
  };
}

/**
 * `step` with what it throws turned into an `internal` refusal: a store that cannot be used (a
 * directory that cannot be written, a lock held too long) is a refusal that says so, not an
 * exception thrown into an MCP request or a CLI command.
 */
function guarded<A extends unknown[], R>(step: string, run: (...args: A) => Promise<R>): (...args: A) => Promise<R | Refusal> {
  return async (...args) => {
    try {
      return await run(...args);
    } catch (err) {
      return { ok: false, kind: 'internal', message: `the toolsmith could not ${step}: ${(err as Error).message}` };
    }
  };
}
