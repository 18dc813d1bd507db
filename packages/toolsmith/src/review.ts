import type { Refusal } from '@forge/runner';
import type { ToolsmithContext } from './context.js';
import type { ProposalReview } from './contract.js';

/** See `Toolsmith.show`: a proposal beside the live tool it would replace and the gap it answers. */
export async function showProposal(
  ctx: Pick<ToolsmithContext, 'gaps' | 'proposals' | 'damaged' | 'activeTool'>,
  id: string,
): Promise<ProposalReview | Refusal> {
  const p = await ctx.damaged.read(ctx.proposals, id);
  if (!p) return ctx.damaged.refusal(id);
  const live = await ctx.activeTool(p.name);
  const liveProposal = live ? (await ctx.proposals.lineage(p.name)).find((x) => x.state === 'active') : undefined;
  const history = p.gap ? (await ctx.gaps.history(p.gap.kind, p.gap.signature)).slice(-50) : [];
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
