import { basename } from 'node:path';
import {
  checkCapability,
  checkNamespace,
  checkRuntime,
  checkToolName,
  type PolicySnapshot,
  type ToolsmithSettings,
  toolsmithFor,
} from '@forge/policy';
import { type StoredTool, type ToolExample, type ToolSpec, validateSpec } from '@forge/registry';
import type { CallContext, Forge, Refusal } from '@forge/runner';
import { readBlueprint, readRequest } from './blueprint.js';
import { type FileGapStore, openGapStore } from './gaps.js';
import { capabilitySlug, deriveToolName } from './naming.js';
import { type FileProposalStore, isProposalId, openProposalStore } from './proposals.js';
import type { Awaitable, GapStore, ProposalStore, UpdateResult } from './stores.js';
import type { GapKind, GapSummary, Proposal, ProposalState, ValidationRecord } from './types.js';
import { specDigest, validateProposal } from './validate.js';

/**
 * The toolsmith: capability gaps become proposals, proposals are validated in the sandbox, a
 * listed approver approves, and only then does a tool go live. Every step re-reads the policy
 * (`toolsmith.enabled`, the `paused` kill switch) and every transition is a `toolsmith.*` entry
 * of forge's audit log.
 */

export interface ToolsmithOptions<G extends GapStore = FileGapStore, P extends ProposalStore = FileProposalStore> {
  /** The engine the toolsmith validates in and activates through (its policy, sandbox and audit log). */
  forge: Forge;
  /** Where the file stores of the project live (default `forge.paths.toolsmithDir`); unused for a store given below. */
  dir?: string;
  /**
   * The gap store (default: the file store `openGapStore` in `dir`, bounded by policy
   * `toolsmith.gap_store_max`). A store given here stays the caller's: `close()` flushes it but
   * does not close it.
   */
  gapStore?: G;
  /** The proposal store (default: the file store `openProposalStore` in `dir`); the caller's, like `gapStore`. */
  proposalStore?: P;
  /** Clock (ms since the epoch). */
  now?: () => number;
  /** Where best-effort failures go (a gap the store could not take); default a process warning. */
  onWarning?: (message: string) => void;
}

/** An operator acting on proposals: an identity that policy `toolsmith.approvers` lists. */
export interface Operator {
  by: string;
  /** Where the decision was made, for the audit entry: `cli` (default) or `client` (confirmed by the human at an MCP client). */
  via?: 'cli' | 'client';
}

/** What `request` answers. */
export interface RequestAnswer {
  ok: true;
  capability: string;
  gap: GapSummary;
  /** May a proposal for it be authored under policy `toolsmith.capability_allow`? */
  authorable: boolean;
  message: string;
}

/** What `propose` answers: the proposal as stored, validated or failed. */
export interface ProposeAnswer {
  ok: true;
  proposal: Proposal;
  /** Blueprint fields forge did not take (a suggested name, sandbox or network settings, secrets). */
  ignored: string[];
  message: string;
}

/** A reviewable summary of one proposal (`forge toolsmith show`). */
export interface ProposalReview {
  ok: true;
  proposal: Proposal;
  /** The active tool of that name, if any. */
  active?: { version: number; digest: string; state: string; proposal?: string };
  /** A line diff of the impl against the active version (empty when there is none). */
  impl_diff: string;
  /** The gap's observations (newest last, at most 50). */
  gap_history: readonly { at: string; persona: string; source: string; description?: string }[];
}

/** What `cycle` reports. */
export interface CycleReport {
  ok: true;
  at: string;
  /** Qualifying `missing_tool` gaps with no proposal in flight or live: tools wanted. */
  wanted: GapSummary[];
  /** Qualifying `service_absent` gaps: operator signals (a gateway server that cannot run), never authored. */
  service_absent: GapSummary[];
  /** Proposals waiting for an approver. */
  awaiting_approval: number;
}

/** Where the toolsmith stands for one persona. */
export interface ToolsmithStatus {
  enabled: boolean;
  paused: boolean;
  pausedWhy?: string;
  mode: 'direct' | 'governed';
  /** May this persona approve through its MCP client (policy approve_in_client; an operator and an approver)? */
  approvesInClient: boolean;
}

/** The toolsmith of one project; `G` and `P` are the types of its stores (the file stores unless others were given). */
export interface Toolsmith<G extends GapStore = FileGapStore, P extends ProposalStore = FileProposalStore> {
  readonly gaps: G;
  readonly proposals: P;
  /** For `ForgeOptions.onUnknownTool`: records a `missing_tool` gap; the returned hint goes into the `unknown_tool` message. */
  unknownTool(name: string, ctx: { persona: string; session: string }): string | undefined;
  /** `forge_request {capability, description, example_inputs?}`: records the need explicitly. */
  request(args: unknown, ctx?: CallContext): Promise<RequestAnswer | Refusal>;
  /** `forge_propose {…}`: stores the blueprint as a proposal and validates it at once. */
  propose(args: unknown, ctx?: CallContext): Promise<ProposeAnswer | Refusal>;
  list(o?: { state?: ProposalState | ProposalState[]; name?: string }): Promise<Proposal[]>;
  get(id: string): Promise<Proposal | undefined>;
  show(id: string): Promise<ProposalReview | Refusal>;
  approve(id: string, op: Operator): Promise<{ ok: true; proposal: Proposal; tool: StoredTool; revalidated: boolean } | Refusal>;
  reject(id: string, op: Operator & { reason: string }): Promise<{ ok: true; proposal: Proposal } | Refusal>;
  retire(name: string, op: Operator & { reason?: string }): Promise<{ ok: true; tool: StoredTool; proposal?: Proposal } | Refusal>;
  rollback(name: string, op: Operator): Promise<{ ok: true; tool: StoredTool; proposal: Proposal; from?: Proposal } | Refusal>;
  /** Every gap held, judged by the policy's threshold and window now (`forge toolsmith gaps`); readable while off or paused. */
  gapSummary(): GapSummary[] | Refusal | Promise<GapSummary[] | Refusal>;
  /** Promotes qualifying gaps to wanted signals and reports; never authors or approves. */
  cycle(): Promise<CycleReport | Refusal>;
  status(persona?: string): ToolsmithStatus;
  close(): Promise<void>;
}

const PERSONA_PATTERN = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;

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
  /** Proposal files of the file store that cannot be used, by id: a refusal of that id names the file. */
  const damaged = new Map<string, string>();
  const onProblem = (file: string, reason: string) => {
    warn(`${file}: ${reason}; it is skipped (restore it from a copy, or move it away and propose the tool again)`);
    const id = basename(file, '.json');
    if (isProposalId(id)) damaged.set(id, `${file}: ${reason}`);
  };
  const proposals = (o.proposalStore ?? openProposalStore({ dir, now: () => new Date(now()), onProblem })) as P;
  /** The proposal `id`, or undefined; a damaged file for it is remembered for `unknownProposal`. */
  const proposalOf = async (id: string): Promise<Proposal | undefined> => {
    damaged.delete(id);
    return proposals.get(id);
  };
  let pausedNoted: string | undefined;
  /** Proposals made per session by this process (the forge-count breaker's limit applies). */
  const proposedBy = new Map<string, number>();

  const record = async (type: string, data: Record<string, unknown>): Promise<Refusal | undefined> =>
    forge.recordEvent(`toolsmith.${type}`, data);

  /** The policy and the toolsmith's settings for `persona`, or why the step may not run. */
  const gate = async (
    persona: string,
    step: string,
    o: { needsEnabled?: boolean; pausable?: boolean } = {},
  ): Promise<{ ok: true; snap: PolicySnapshot; t: ToolsmithSettings } | Refusal> => {
    const pol = forge.policy();
    if (!pol.ok) return pol;
    const t = toolsmithFor(pol.snapshot, persona);
    if (o.needsEnabled !== false && !t.enabled)
      return {
        ok: false,
        kind: 'policy_denied',
        message: `the toolsmith is off (policy toolsmith.enabled is false), so nothing can be ${step}; an operator enables it in policy.json`,
      };
    if (o.pausable !== false && t.paused) {
      const why = t.pausedWhy ?? 'paused';
      if (pausedNoted !== `${pol.snapshot.digest}:${why}`) {
        pausedNoted = `${pol.snapshot.digest}:${why}`;
        await record('paused', { step, reason: why, policy: pol.snapshot.digest });
      }
      return { ok: false, kind: 'policy_denied', message: `the toolsmith is paused, so nothing can be ${step}: ${why}` };
    }
    return { ok: true, snap: pol.snapshot, t };
  };

  /** An operator's identity, checked against `toolsmith.approvers`. */
  const approver = (snap: PolicySnapshot, by: unknown, what: string): Refusal | undefined => {
    if (typeof by !== 'string' || !PERSONA_PATTERN.test(by))
      return {
        ok: false,
        kind: 'validation_failed',
        message: `the approver's identity must be a name of letters, digits, "_" and "-" (got ${JSON.stringify(by)}); pass --as <name> or set FORGE_OPERATOR`,
      };
    const list = snap.policy.toolsmith.approvers;
    if (!list.includes(by))
      return {
        ok: false,
        kind: 'policy_denied',
        message:
          list.length === 0
            ? `"${by}" may not ${what}: policy toolsmith.approvers names no one; an operator adds approvers to policy.json`
            : `"${by}" may not ${what}: not in policy toolsmith.approvers (${list.join(', ')})`,
      };
    return undefined;
  };

  const unknownProposal = (id: string): Refusal => {
    const why = damaged.get(id);
    // A damaged file is not "no proposal": the operator is told which file and what to do.
    if (why)
      return {
        ok: false,
        kind: 'unknown_proposal',
        message: `proposal "${id}" cannot be read, so nothing was done: ${why}; restore the file from a copy, or move it away and propose the tool again`,
      };
    return { ok: false, kind: 'unknown_proposal', message: `no proposal "${id}" in this project; \`forge toolsmith list\` shows them` };
  };

  /** The live tool of `name` in the project scope (the toolsmith's tools live there). */
  const activeTool = async (name: string): Promise<StoredTool | undefined> =>
    (await forge.listTools({ scope: 'project' })).find((t) => t.tool.name === name)?.tool;

  /** One gap's recurrence under the policy's threshold and window (the gap store's summary of it). */
  const summaryOf = (snap: PolicySnapshot, kind: GapKind, signature: string): Awaitable<GapSummary> => {
    const t = toolsmithFor(snap, 'default');
    const at = now();
    const none: GapSummary = {
      kind,
      signature,
      count: 0,
      total: 0,
      first_at: at,
      last_at: at,
      personas: [],
      sources: [],
      qualifies: false,
    };
    const rows = gaps.summary({ threshold: t.threshold, windowMs: t.windowMs, now: at, only: { kind, signature } });
    return rows instanceof Promise ? rows.then(([row]) => row ?? none) : (rows[0] ?? none);
  };

  const toolsmith: Toolsmith<G, P> = {
    gaps,
    proposals,

    unknownTool(name, ctx) {
      const pol = forge.policy();
      if (!pol.ok) return undefined;
      const t = toolsmithFor(pol.snapshot, ctx.persona);
      if (!t.enabled || t.paused) return undefined;
      // A client calls by the wire name (`text__reverse`): the gap is the forge name's (`text.reverse`).
      const slug = capabilitySlug(name.replaceAll('__', '.'));
      const signature = slug.ok ? slug.slug : name.toLowerCase().slice(0, 128);
      gaps.note({ kind: 'missing_tool', signature, source: 'unknown_tool', persona: ctx.persona, session: ctx.session, asked: name });
      void record('gap_recorded', { kind: 'missing_tool', signature, source: 'unknown_tool', persona: ctx.persona, session: ctx.session });
      if (t.mode !== 'governed') return undefined;
      const hours = t.windowMs / 3_600_000;
      // The record being written counts too.
      const seen = summaryOf(pol.snapshot, 'missing_tool', signature);
      // The hint is given at once: a store that answers later (a database) gets one without the count.
      if (seen instanceof Promise) {
        seen.catch(() => {});
        return `the toolsmith noted the request (a tool is wanted once it is asked for ${t.threshold} times in ${hours} h); to ask for it now, call forge_request {capability, description, example_inputs}`;
      }
      const count = seen.count + 1;
      return count >= t.threshold
        ? `the toolsmith has seen "${signature}" asked for ${count} times in ${hours} h, so a tool for it is wanted: propose one with forge_propose {capability: "${signature}", description, input_schema, impl, runtime, examples}`
        : `the toolsmith noted the request (${count} of ${t.threshold} in ${hours} h before a tool is wanted); to ask for it now, call forge_request {capability, description, example_inputs}`;
    },

    async request(args, ctx = {}) {
      const { persona, session } = forge.caller(ctx);
      const g = await gate(persona, 'requested');
      if (!g.ok) return g;
      const r = readRequest(args);
      if (!r.ok) return r;
      const slug = capabilitySlug(r.capability);
      if (!slug.ok) return slug;
      try {
        await gaps.record({
          kind: 'missing_tool',
          signature: slug.slug,
          source: 'forge_request',
          persona,
          session,
          description: r.description,
          ...(r.example_inputs ? { example_inputs: r.example_inputs } : {}),
        });
      } catch (err) {
        return { ok: false, kind: 'internal', message: `the request could not be recorded: ${(err as Error).message}` };
      }
      const lost = await record('gap_recorded', { kind: 'missing_tool', signature: slug.slug, source: 'forge_request', persona, session });
      if (lost) return lost;
      const gap = await summaryOf(g.snap, 'missing_tool', slug.slug);
      const authorable = checkCapability(g.snap, slug.slug).ok;
      const message = !authorable
        ? `recorded; "${slug.slug}" is outside policy toolsmith.capability_allow, so no tool can be proposed for it until an operator allows it`
        : gap.qualifies
          ? `recorded; "${slug.slug}" is wanted (${gap.count} requests in the window): propose it with forge_propose {capability: "${slug.slug}", description, input_schema, impl, runtime, examples}`
          : `recorded (${gap.count} of ${g.t.threshold} in the window before it is wanted); you may propose it now with forge_propose`;
      return { ok: true, capability: slug.slug, gap, authorable, message };
    },

    async propose(args, ctx = {}) {
      const { persona, session } = forge.caller(ctx);
      const refuse = async (r: Refusal, extra: Record<string, unknown> = {}): Promise<Refusal> => {
        const lost = await record('proposed', { ok: false, persona, session, kind: r.kind, message: r.message, ...extra });
        return lost ?? r;
      };
      const g = await gate(persona, 'proposed');
      if (!g.ok) return g.kind === 'policy_denied' ? refuse(g) : g;
      // Each proposal costs sandbox runs: a session proposes at most as many tools as it may forge.
      const limit = g.snap.policy.breakers.per_session_forge_count;
      const made = proposedBy.get(session) ?? 0;
      if (made >= limit)
        return refuse({
          ok: false,
          kind: 'breaker_open',
          message: `session "${session}" has made ${made} proposals, the most policy breakers.per_session_forge_count allows; start a new session or ask an operator`,
        });
      proposedBy.set(session, made + 1);
      const b = readBlueprint(args);
      if (!b.ok) return refuse(b);
      const slug = capabilitySlug(b.capability);
      if (!slug.ok) return refuse(slug);
      const capability = slug.slug;
      const allowed = checkCapability(g.snap, capability);
      if (!allowed.ok) return refuse(allowed as Refusal, { capability });
      const ns = g.snap.policy.persona_namespaces[persona];
      const named = deriveToolName(capability, Object.hasOwn(g.snap.policy.persona_namespaces, persona) ? ns : undefined);
      if (!named.ok) return refuse(named, { capability });
      const name = named.name;
      for (const d of [checkToolName(g.snap, name), checkNamespace(g.snap, persona, name)])
        if (!d.ok) return refuse(d as Refusal, { capability, name });
      const spec: ToolSpec = {
        name,
        description: b.description,
        input_schema: b.input_schema,
        ...(b.output_schema ? { output_schema: b.output_schema } : {}),
        impl: b.impl,
        runtime: b.runtime,
        ...(b.meta ? { meta: b.meta } : {}),
        examples: b.examples,
      };
      // The spec's shape as forging checks it (the runtime is policy's and the host's, checked next).
      const shape = validateSpec(spec, { runtimes: [spec.runtime] });
      if (!shape.ok) return refuse({ ok: false, kind: shape.kind, message: shape.message }, { capability, name });
      const rt = checkRuntime(g.snap, spec.runtime);
      if (!rt.ok) return refuse(rt as Refusal, { capability, name });
      try {
        await forge.runtimeOf(spec.runtime);
      } catch (err) {
        return refuse({ ok: false, kind: 'validation_failed', message: `runtime: ${(err as Error).message}` }, { capability, name });
      }
      const live = await activeTool(name);
      const liveProposal = live ? (await proposals.lineage(name)).find((p) => p.state === 'active') : undefined;
      const proposal = await proposals.create({
        state: 'pending',
        name,
        capability,
        persona,
        session,
        // The gap it answers, as the gap store keys it (normalised like every signature).
        gap: { kind: 'missing_tool', signature: gapOf(b.gap?.signature) ?? capability },
        spec,
        ...(live
          ? { replaces: { version: live.version, digest: live.digest, ...(liveProposal ? { proposal: liveProposal.id } : {}) } }
          : {}),
        by: persona,
      });
      const lost = await record('proposed', {
        ok: true,
        id: proposal.id,
        name,
        capability,
        persona,
        session,
        spec_digest: specDigest(spec),
        ...(proposal.replaces ? { replaces: proposal.replaces } : {}),
        ...(b.ignored.length > 0 ? { ignored: b.ignored } : {}),
      });
      if (lost) {
        await proposals.transition(proposal.id, ['pending'], 'failed', { by: 'forge', reason: 'the audit log did not take the proposal' });
        return lost;
      }
      const validated = await runValidation(proposal, g.snap, live);
      if (!validated.ok) return validated;
      const p = validated.proposal;
      const ignoredNote =
        b.ignored.length > 0
          ? ` (not taken from the blueprint: ${b.ignored.join(', ')}; sandbox, network and secrets come from policy)`
          : '';
      const message =
        p.state === 'validated'
          ? `proposal ${p.id} for "${name}" passed validation (${p.validation?.summary}) and waits for an approver: forge toolsmith approve ${p.id}${ignoredNote}`
          : `proposal ${p.id} for "${name}" failed validation: ${p.validation?.summary}; fix it and propose again${ignoredNote}`;
      return { ok: true, proposal: p, ignored: b.ignored, message };
    },

    list: (o = {}) => proposals.list(o),
    get: (id) => proposals.get(id),

    async show(id) {
      const p = await proposalOf(id);
      if (!p) return unknownProposal(id);
      const live = await activeTool(p.name);
      const liveProposal = live ? (await proposals.lineage(p.name)).find((x) => x.state === 'active') : undefined;
      const history = p.gap ? (await gaps.history(p.gap.kind, p.gap.signature)).slice(-50) : [];
      return {
        ok: true,
        proposal: p,
        ...(live
          ? {
              active: {
                version: live.version,
                digest: live.digest,
                state: live.state,
                ...(liveProposal ? { proposal: liveProposal.id } : {}),
              },
            }
          : {}),
        impl_diff: live && live.impl !== p.spec.impl ? lineDiff(live.impl, p.spec.impl) : '',
        gap_history: history.map((r) => ({
          at: new Date(r.at).toISOString(),
          persona: r.persona,
          source: r.source,
          ...(r.description !== undefined ? { description: r.description } : {}),
        })),
      };
    },

    async approve(id, op) {
      const g = await gate('default', 'approved');
      if (!g.ok) return g;
      const denied = approver(g.snap, op.by, 'approve proposals');
      if (denied) return denied;
      const p = await proposalOf(id);
      if (!p) return unknownProposal(id);
      if (p.persona === op.by)
        return { ok: false, kind: 'policy_denied', message: `"${op.by}" proposed ${id} and may not approve it; another approver must` };
      if (p.state !== 'validated')
        return {
          ok: false,
          kind: 'state_conflict',
          message: `proposal ${id} is ${p.state}, not validated; only a validated proposal can be approved${p.state === 'failed' ? ` (it failed: ${p.validation?.summary})` : ''}`,
        };
      // The current policy, not the one the proposal was validated under.
      const allowed = checkCapability(g.snap, p.capability);
      if (!allowed.ok) return allowed as Refusal;
      for (const d of [checkToolName(g.snap, p.name), checkNamespace(g.snap, p.persona, p.name)]) if (!d.ok) return d as Refusal;
      const live = await activeTool(p.name);
      if ((live?.digest ?? null) !== (p.replaces?.digest ?? null))
        return {
          ok: false,
          kind: 'state_conflict',
          message: `the live "${p.name}" changed since ${id} was proposed (${live ? `now version ${live.version}` : 'now none'}); the proposal must be made again against it`,
        };
      // One approval ever: racing approvers get exactly one activation.
      if (!(await proposals.claim(id, op.by))) {
        const again = await proposals.get(id);
        return {
          ok: false,
          kind: 'state_conflict',
          message: `proposal ${id} is already being approved or was approved (${again?.state ?? 'unknown'}); nothing was done`,
        };
      }
      let revalidated = false;
      let current = p;
      const release = async (why: string, r: Refusal): Promise<Refusal> => {
        await proposals.release(id);
        warn(`approval of ${id} was taken back: ${why}`);
        return r;
      };
      const runtimeNow = await forge.runtimeOf(p.spec.runtime).catch((err: Error) => `unavailable (${err.message})`);
      // What the approver reviewed is what goes live: a spec that changed after validation (its
      // file edited) is refused, never validated again under the same approval.
      if (p.validation?.spec_digest !== specDigest(p.spec))
        return release('its spec changed after validation', {
          ok: false,
          kind: 'state_conflict',
          message: `proposal ${id}'s spec is not the one validated (${p.validation?.spec_digest ?? 'none'}, now ${specDigest(p.spec)}): its file was changed; propose it again`,
        });
      // Validated again when what it was validated under changed: the policy or the runtime.
      if (p.validation?.policy_digest !== g.snap.digest || p.validation?.runtime !== runtimeNow) {
        revalidated = true;
        const again = await runValidation(p, g.snap, live, ['validated']);
        if (!again.ok) return release('validation could not run', again);
        current = again.proposal;
        if (current.state !== 'validated') {
          await proposals.release(id);
          return {
            ok: false,
            kind: 'validation_failed',
            message: `the policy or the runtime changed since ${id} was validated, and it fails validation now: ${current.validation?.summary}`,
          };
        }
      }
      // Re-read at every step: a kill switch set while validation ran stops the activation.
      const still = await gate('default', 'approved');
      if (!still.ok) return release('the toolsmith was paused or turned off', still);
      const lostApproval = await record('approved', {
        id,
        name: p.name,
        by: op.by,
        via: op.via ?? 'cli',
        revalidated,
        spec_digest: specDigest(current.spec),
        policy: still.snap.digest,
      });
      if (lostApproval) return release('the audit log did not take the approval', lostApproval);
      const made = await forge.forgeTool(current.spec, {
        persona: p.persona,
        session: p.session,
        scope: 'project',
        overwrite: true,
        activation: { proposal: id, approvedBy: op.by },
      });
      if (!made.ok) return release(`the forge pipeline refused it: ${made.kind}`, made);
      const at = new Date(now()).toISOString();
      // The tool is live now (the registry decides): the proposal's record follows it, and the log
      // says so even when the record cannot be written.
      let moved: UpdateResult | undefined;
      let recordError: string | undefined;
      for (let attempt = 0; attempt < 3 && !moved?.ok; attempt++) {
        try {
          moved = await proposals.transition(id, ['validated'], 'active', {
            by: op.by,
            change: () => ({ activated: { version: made.tool.version, digest: made.tool.digest, at, by: op.by } }),
          });
          if (!moved.ok) break;
        } catch (err) {
          recordError = (err as Error).message;
        }
      }
      if (p.replaces?.proposal)
        await proposals
          .transition(p.replaces.proposal, ['active'], 'retired', { by: op.by, reason: `replaced by ${id}` })
          .catch((err: Error) => warn(`proposal ${p.replaces?.proposal} could not be marked retired: ${err.message}`));
      const lost = await record('activated', {
        id,
        name: p.name,
        by: op.by,
        version: made.tool.version,
        digest: made.tool.digest,
        ...(p.replaces ? { replaced: p.replaces } : {}),
      });
      if (lost) return lost;
      if (!moved?.ok)
        return {
          ok: false,
          kind: 'internal',
          message: `"${p.name}" is live as version ${made.tool.version} (approved by ${op.by}, audited), but proposal ${id}'s record could not be updated (${moved?.message ?? recordError ?? 'unknown error'}); retire the tool with forge toolsmith retire ${p.name} if it should not stay live`,
        };
      return { ok: true, proposal: moved.proposal, tool: made.tool, revalidated };
    },

    async reject(id, op) {
      const g = await gate('default', 'rejected', { pausable: false, needsEnabled: false });
      if (!g.ok) return g;
      const denied = approver(g.snap, op.by, 'reject proposals');
      if (denied) return denied;
      if (typeof op.reason !== 'string' || op.reason.trim() === '')
        return { ok: false, kind: 'validation_failed', message: 'a rejection needs a reason (--reason "…"): the proposer sees it' };
      const p = await proposalOf(id);
      if (!p) return unknownProposal(id);
      if (!['pending', 'validated', 'failed'].includes(p.state))
        return {
          ok: false,
          kind: 'state_conflict',
          message: `proposal ${id} is ${p.state}; only a pending, validated or failed proposal can be rejected`,
        };
      // The decision is one-shot too: a rejection and an approval racing give exactly one of them.
      if (!(await proposals.claim(id, op.by)))
        return {
          ok: false,
          kind: 'state_conflict',
          message: `proposal ${id} is already being decided (approved or rejected); nothing was done`,
        };
      const moved = await proposals.transition(id, ['pending', 'validated', 'failed'], 'rejected', {
        by: op.by,
        reason: op.reason.slice(0, 1000),
      });
      if (!moved.ok) return { ok: false, kind: moved.kind, message: moved.message };
      const lost = await record('rejected', { id, name: p.name, by: op.by, reason: op.reason.slice(0, 1000) });
      return lost ?? { ok: true, proposal: moved.proposal };
    },

    async retire(name, op) {
      // Retiring takes capability away: it works while paused or off (a kill switch must not keep a bad tool live).
      const g = await gate('default', 'retired', { pausable: false, needsEnabled: false });
      if (!g.ok) return g;
      const denied = approver(g.snap, op.by, 'retire tools');
      if (denied) return denied;
      const live = await activeTool(name);
      if (!live) return { ok: false, kind: 'unknown_tool', message: `no live tool "${name}" in this project to retire` };
      const owner = (await proposals.lineage(name)).find((p) => p.state === 'active');
      const r = await forge.setToolState(name, 'retired', {
        scope: 'project',
        from: ['active'],
        digest: live.digest,
        event: {
          type: 'toolsmith.retired',
          data: { by: op.by, ...(op.reason ? { reason: op.reason.slice(0, 1000) } : {}), ...(owner ? { id: owner.id } : {}) },
        },
      });
      if (!r.ok) return r;
      const moved = owner
        ? await proposals.transition(owner.id, ['active'], 'retired', { by: op.by, ...(op.reason ? { reason: op.reason } : {}) })
        : undefined;
      return { ok: true, tool: r.tool, ...(moved?.ok ? { proposal: moved.proposal } : {}) };
    },

    async rollback(name, op) {
      const g = await gate('default', 'rolled back');
      if (!g.ok) return g;
      const denied = approver(g.snap, op.by, 'roll tools back');
      if (denied) return denied;
      const lineage = await proposals.lineage(name);
      const current = lineage[0];
      const previous = current?.state === 'active' ? lineage[1] : current?.state === 'retired' ? lineage[1] : undefined;
      if (!current || !previous)
        return {
          ok: false,
          kind: 'unknown_tool',
          message: `"${name}" has no earlier toolsmith version to roll back to (${lineage.length} activated so far)`,
        };
      const live = await activeTool(name);
      const made = await forge.forgeTool(previous.spec, {
        persona: previous.persona,
        session: previous.session,
        scope: 'project',
        overwrite: true,
        activation: { proposal: previous.id, approvedBy: op.by },
      });
      if (!made.ok) return made;
      const at = new Date(now()).toISOString();
      if (current.state === 'active')
        await proposals.transition(current.id, ['active'], 'retired', { by: op.by, reason: `rolled back to ${previous.id}` });
      const moved = await proposals.transition(previous.id, ['retired'], 'active', {
        by: op.by,
        reason: `rollback from ${current.id}`,
        change: () => ({ activated: { version: made.tool.version, digest: made.tool.digest, at, by: op.by } }),
      });
      if (!moved.ok) return { ok: false, kind: moved.kind, message: moved.message };
      const lost = await record('rolled_back', {
        name,
        by: op.by,
        from: current.id,
        to: previous.id,
        version: made.tool.version,
        digest: made.tool.digest,
        ...(live ? { replaced: { version: live.version, digest: live.digest } } : {}),
      });
      if (lost) return lost;
      return { ok: true, tool: made.tool, proposal: moved.proposal, from: current };
    },

    gapSummary() {
      const pol = forge.policy();
      if (!pol.ok) return pol;
      const t = toolsmithFor(pol.snapshot, 'default');
      const rows = gaps.summary({ threshold: t.threshold, windowMs: t.windowMs, now: now() });
      if (!(rows instanceof Promise)) return rows;
      return rows.catch(
        (err: Error): Refusal => ({ ok: false, kind: 'internal', message: `the toolsmith could not read its gaps: ${err.message}` }),
      );
    },

    async cycle() {
      const g = await gate('default', 'cycled');
      if (!g.ok) return g;
      const rows = (await gaps.summary({ threshold: g.t.threshold, windowMs: g.t.windowMs, now: now() })).filter((s) => s.qualifies);
      const open = await proposals.list({ state: ['pending', 'validated', 'active'] });
      const inFlight = new Set(open.map((p) => p.capability));
      const wanted = rows.filter((s) => s.kind === 'missing_tool' && !inFlight.has(s.signature));
      const absent = rows.filter((s) => s.kind === 'service_absent');
      const awaiting = open.filter((p) => p.state === 'validated').length;
      const at = new Date(now()).toISOString();
      const lost = await record('cycle', {
        wanted: wanted.map((w) => ({ signature: w.signature, count: w.count })),
        service_absent: absent.map((s) => ({ server: s.signature, count: s.count })),
        awaiting_approval: awaiting,
      });
      if (lost) return lost;
      for (const s of absent)
        await record('service_absent', { server: s.signature, count: s.count, last_at: new Date(s.last_at).toISOString() });
      return { ok: true, at, wanted, service_absent: absent, awaiting_approval: awaiting };
    },

    status(persona = 'default') {
      const pol = forge.policy();
      if (!pol.ok) return { enabled: false, paused: true, pausedWhy: pol.message, mode: 'governed', approvesInClient: false };
      const t = toolsmithFor(pol.snapshot, persona);
      return {
        enabled: t.enabled,
        paused: t.paused,
        ...(t.pausedWhy ? { pausedWhy: t.pausedWhy } : {}),
        mode: t.mode,
        approvesInClient: t.approvesInClient,
      };
    },

    async close() {
      unsubscribe();
      // A store given to createToolsmith stays the caller's to close; its pending notes are flushed.
      if (ownGaps) await gaps.close();
      else await gaps.flush();
    },
  };

  /** Validates `p` (pending, or `from`) and moves it to validated or failed with the record. */
  async function runValidation(
    p: Proposal,
    snap: PolicySnapshot,
    live: StoredTool | undefined,
    from: ProposalState[] = ['pending'],
  ): Promise<{ ok: true; proposal: Proposal } | Refusal> {
    const regression: readonly ToolExample[] = live?.examples ?? [];
    const rec: ValidationRecord = await validateProposal({
      forge,
      spec: p.spec,
      persona: p.persona,
      session: p.session,
      proposal: p.id,
      snap,
      regression,
      now,
      stopped: () => {
        const s = toolsmith.status(p.persona);
        return !s.enabled ? 'the toolsmith was turned off' : s.paused ? (s.pausedWhy ?? 'paused') : undefined;
      },
    });
    const to = rec.ok ? 'validated' : 'failed';
    const moved = await proposals.transition(p.id, from, to, {
      by: 'forge',
      ...(rec.ok ? {} : { reason: rec.summary.slice(0, 1000) }),
      change: () => ({ validation: rec }),
    });
    if (!moved.ok) return { ok: false, kind: moved.kind, message: moved.message };
    const lost = await record(rec.ok ? 'validated' : 'validation_failed', {
      id: p.id,
      name: p.name,
      sandbox_runs: rec.sandbox_runs,
      checks: rec.checks.length,
      duration_ms: rec.duration_ms,
      runtime: rec.runtime,
      policy: rec.policy_digest,
      ...(rec.ok ? {} : { summary: rec.summary.slice(0, 500) }),
    });
    return lost ?? { ok: true, proposal: moved.proposal };
  }

  // A gateway server that cannot start is a service gap: an operator signal, never authored.
  const unsubscribe = forge.on('audit', (ev) => {
    if (ev.type !== 'gateway.upstream_exited' || ev.data.phase !== 'start' || typeof ev.data.server !== 'string') return;
    const pol = forge.policy();
    if (!pol.ok) return;
    const t = toolsmithFor(pol.snapshot, 'default');
    if (!t.enabled || t.paused) return;
    const server = ev.data.server.slice(0, 128);
    gaps.note({ kind: 'service_absent', signature: server, source: 'gateway', persona: 'forge', session: '-' });
    void record('gap_recorded', { kind: 'service_absent', signature: server, source: 'gateway' });
  });

  // A store that cannot be used (a directory that cannot be written, a lock held too long) is a
  // refusal that says so, not an exception thrown into an MCP request or a CLI command.
  for (const step of ['request', 'propose', 'show', 'approve', 'reject', 'retire', 'rollback', 'cycle'] as const) {
    const run = toolsmith[step] as (...args: unknown[]) => Promise<unknown>;
    (toolsmith as unknown as Record<string, unknown>)[step] = async (...args: unknown[]) => {
      try {
        return await run(...args);
      } catch (err) {
        return { ok: false, kind: 'internal', message: `the toolsmith could not ${step}: ${(err as Error).message}` };
      }
    };
  }
  return toolsmith;
}

/** A gap signature as the store keys it (the capability slug), or undefined for none. */
function gapOf(signature: string | undefined): string | undefined {
  if (signature === undefined) return undefined;
  const slug = capabilitySlug(signature);
  return slug.ok ? slug.slug : signature;
}

/** A small line diff (`-`/`+`/` ` lines) of two texts, for review. Longest-common-subsequence, bounded to 2,000 lines each. */
export function lineDiff(a: string, b: string): string {
  const x = a.split('\n').slice(0, 2000);
  const y = b.split('\n').slice(0, 2000);
  const n = x.length;
  const m = y.length;
  const lcs: number[][] = Array.from({ length: n + 1 }, () => new Array<number>(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--) {
      const row = lcs[i] as number[];
      row[j] =
        x[i] === y[j]
          ? ((lcs[i + 1] as number[])[j + 1] as number) + 1
          : Math.max((lcs[i + 1] as number[])[j] as number, row[j + 1] as number);
    }
  const out: string[] = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && x[i] === y[j]) {
      out.push(`  ${x[i]}`);
      i++;
      j++;
    } else if (i < n && (j >= m || ((lcs[i + 1] as number[])[j] as number) >= ((lcs[i] as number[])[j + 1] as number))) {
      // A changed line reads as the old one taken out, then the new one put in.
      out.push(`- ${x[i]}`);
      i++;
    } else {
      out.push(`+ ${y[j]}`);
      j++;
    }
  }
  return out.join('\n');
}
