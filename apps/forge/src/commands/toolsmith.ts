import { userInfo } from 'node:os';
import type { ProposalState, Toolsmith } from '@forge/toolsmith';
import { UsageError } from '../args.js';
import type { Command, Io } from '../command.js';
import { withToolsmith } from '../context.js';
import { refusalLine } from '../format.js';
import { cycleLines, gapRows, proposalRows, reviewLines } from '../toolsmith-format.js';
import type { Where } from '../where.js';

type Refusal = { ok: false; kind: string; message: string };

const STATES: readonly ProposalState[] = ['pending', 'validated', 'failed', 'rejected', 'active', 'retired'];

const asOption = { as: { type: 'string' } } as const;
const AS_LINE = '--as NAME   who approves (default $FORGE_OPERATOR, else the login name); policy toolsmith.approvers must list it';

/** The operator acting: `--as`, else FORGE_OPERATOR, else the login name (the service checks it against toolsmith.approvers). */
export function operator(values: Record<string, unknown>, env: NodeJS.ProcessEnv): string {
  if (typeof values.as === 'string') return values.as;
  if (env.FORGE_OPERATOR) return env.FORGE_OPERATOR;
  try {
    return userInfo().username;
  } catch {
    return '';
  }
}

/** Prints a refusal (JSON or a line on stderr); exit 1. */
function refuse(out: Io['out'], r: Refusal): number {
  if (out.json) out.data(r);
  else out.note(refusalLine(r, out.style));
  return 1;
}

/** Says on stderr why nothing can happen while the toolsmith is off or paused (listing still works). */
function noteStatus(out: Io['out'], t: Toolsmith): void {
  const st = t.status();
  if (!st.enabled)
    out.note(out.style.yellow('the toolsmith is off (policy toolsmith.enabled is false): nothing is proposed, validated or approved'));
  else if (st.paused) out.note(out.style.yellow(`the toolsmith is paused: ${st.pausedWhy ?? 'paused'}`));
}

/** Runs one toolsmith step in an engine opened for this command. */
const withSmith = <T>(w: Where, fn: (t: Toolsmith) => Promise<T>): Promise<T> => withToolsmith(w, (t) => fn(t));

export const toolsmithList: Command = {
  words: 'toolsmith list',
  usage: 'forge toolsmith list [--state S[,S…]]',
  summary: "the project's proposals, newest first: state, tool name, capability, proposing persona",
  details: [`--state S   only these states (${STATES.join(', ')}), comma-separated`],
  options: { state: { type: 'string' } },
  async run({ values }, { out, where }) {
    const states = typeof values.state === 'string' ? values.state.split(',').map((x) => x.trim()) : undefined;
    for (const st of states ?? [])
      if (!STATES.includes(st as ProposalState))
        throw new UsageError(`--state must be one of ${STATES.join(', ')} (got "${st}")`, this.usage);
    const w = await where();
    const list = await withSmith(w, async (t) => {
      if (!out.json) noteStatus(out, t);
      return t.list(states ? { state: states as ProposalState[] } : {});
    });
    if (out.json) out.data(list);
    else for (const l of proposalRows(list, out.style, process.stdout.columns ?? 100)) out.line(l);
    return 0;
  },
};

export const toolsmithShow: Command = {
  words: 'toolsmith show',
  usage: 'forge toolsmith show <id>',
  summary:
    'one proposal for review: capability, name, history, schemas, impl and its diff against the live version, validation record, gap history',
  positionals: [1, 1],
  async run({ positionals }, { out, where }) {
    const w = await where();
    const r = await withSmith(w, (t) => t.show(positionals[0] as string));
    if (!r.ok) return refuse(out, r);
    if (out.json) out.data(r);
    else for (const l of reviewLines(r, out.style)) out.line(l);
    return 0;
  },
};

export const toolsmithApprove: Command = {
  words: 'toolsmith approve',
  usage: 'forge toolsmith approve <id> [--as NAME]',
  summary: 'approve a validated proposal: its tool goes live (one approval ever; re-validated if policy or runtime changed); audited',
  details: [AS_LINE, 'The proposing persona never approves its own proposal. Refused while the toolsmith is off or paused.'],
  options: asOption,
  positionals: [1, 1],
  async run({ values, positionals }, { out, where }) {
    const w = await where();
    const id = positionals[0] as string;
    const r = await withSmith(w, (t) => out.progress(`approving ${id}`, t.approve(id, { by: operator(values, w.env) })));
    if (!r.ok) return refuse(out, r);
    if (out.json) out.data(r);
    else
      out.line(
        `${out.style.green('✓')} approved ${out.style.bold(r.proposal.id)}: ${out.style.bold(r.tool.name)} v${r.tool.version} is live ${out.style.dim(
          `(${r.tool.digest.slice(0, 19)}…, by ${r.proposal.activated?.by ?? '?'}${r.revalidated ? ', re-validated first' : ''})`,
        )}`,
      );
    return 0;
  },
};

export const toolsmithReject: Command = {
  words: 'toolsmith reject',
  usage: 'forge toolsmith reject <id> --reason TEXT [--as NAME]',
  summary: 'reject a proposal (pending, validated or failed) with a reason the proposer sees; audited',
  details: ['--reason TEXT   why (required; at most 1,000 characters are kept)', AS_LINE],
  options: { ...asOption, reason: { type: 'string' } },
  positionals: [1, 1],
  async run({ values, positionals }, { out, where }) {
    if (typeof values.reason !== 'string' || values.reason.trim() === '')
      throw new UsageError('a rejection needs --reason "…" (the proposer sees it)', this.usage);
    const reason = values.reason;
    const w = await where();
    const r = await withSmith(w, (t) => t.reject(positionals[0] as string, { by: operator(values, w.env), reason }));
    if (!r.ok) return refuse(out, r);
    if (out.json) out.data(r);
    else out.line(`${out.style.green('✓')} rejected ${out.style.bold(r.proposal.id)} (${r.proposal.name}): ${reason}`);
    return 0;
  },
};

export const toolsmithRetire: Command = {
  words: 'toolsmith retire',
  usage: 'forge toolsmith retire <name> [--reason TEXT] [--as NAME]',
  summary: 'take a live tool out of service: no longer listed, calls refused (works while paused); audited',
  details: ['--reason TEXT   why (kept in the audit log)', AS_LINE],
  options: { ...asOption, reason: { type: 'string' } },
  positionals: [1, 1],
  async run({ values, positionals }, { out, where }) {
    const w = await where();
    const reason = typeof values.reason === 'string' ? values.reason : undefined;
    const r = await withSmith(w, (t) =>
      t.retire(positionals[0] as string, { by: operator(values, w.env), ...(reason !== undefined ? { reason } : {}) }),
    );
    if (!r.ok) return refuse(out, r);
    if (out.json) out.data(r);
    else
      out.line(
        `${out.style.green('✓')} retired ${out.style.bold(r.tool.name)} v${r.tool.version}${r.proposal ? ` ${out.style.dim(`(${r.proposal.id})`)}` : ''}`,
      );
    return 0;
  },
};

export const toolsmithRollback: Command = {
  words: 'toolsmith rollback',
  usage: 'forge toolsmith rollback <name> [--as NAME]',
  summary: "make the tool's previous approved version live again (the current one is retired); audited",
  details: [AS_LINE],
  options: asOption,
  positionals: [1, 1],
  async run({ values, positionals }, { out, where }) {
    const w = await where();
    const r = await withSmith(w, (t) => t.rollback(positionals[0] as string, { by: operator(values, w.env) }));
    if (!r.ok) return refuse(out, r);
    if (out.json) out.data(r);
    else
      out.line(
        `${out.style.green('✓')} rolled ${out.style.bold(r.tool.name)} back to ${out.style.bold(r.proposal.id)}: live as v${r.tool.version}${
          r.from ? ` ${out.style.dim(`(${r.from.id} retired)`)}` : ''
        }`,
      );
    return 0;
  },
};

export const toolsmithCycle: Command = {
  words: 'toolsmith cycle',
  usage: 'forge toolsmith cycle',
  summary: 'promote qualifying gaps to wanted signals and report them (never authors or approves); audited',
  async run(_p, { out, where }) {
    const w = await where();
    const r = await withSmith(w, (t) => t.cycle());
    if (!r.ok) return refuse(out, r);
    if (out.json) out.data(r);
    else for (const l of cycleLines(r, out.style)) out.line(l);
    return 0;
  },
};

export const toolsmithGaps: Command = {
  words: 'toolsmith gaps',
  usage: 'forge toolsmith gaps',
  summary: "the project's capability gaps: how often each recurred in the window and whether it qualifies",
  async run(_p, { out, where }) {
    const w = await where();
    const r = await withSmith(w, async (t) => t.gapSummary());
    if (!Array.isArray(r)) return refuse(out, r);
    if (out.json) out.data(r);
    else for (const l of gapRows(r, out.style)) out.line(l);
    return 0;
  },
};

export const TOOLSMITH_COMMANDS: readonly Command[] = [
  toolsmithList,
  toolsmithShow,
  toolsmithApprove,
  toolsmithReject,
  toolsmithRetire,
  toolsmithRollback,
  toolsmithCycle,
  toolsmithGaps,
];
