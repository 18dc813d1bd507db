import type { CycleReport, GapSummary, Proposal, ProposalReview, ValidationCheck } from '@forge/toolsmith';
import { clip, ms, type Style, table } from './output.js';

/** Human output of `forge toolsmith …`: what an operator reviews before approving. */

const stateColour = (st: string, s: Style): string =>
  st === 'active'
    ? s.green(st)
    : st === 'validated'
      ? s.yellow(st)
      : st === 'failed' || st === 'rejected'
        ? s.red(st)
        : st === 'retired'
          ? s.dim(st)
          : st;

/** `p-…  validated  text.reverse  text_reverse  coder  2026-…` rows under a header. */
export function proposalRows(list: readonly Proposal[], s: Style, width = 100): string[] {
  if (list.length === 0)
    return [s.dim('no proposals (agents propose tools with forge_propose when the toolsmith is enabled and governed)')];
  const rows = list.map((p) => [
    s.bold(p.id),
    stateColour(p.state, s),
    p.name,
    p.capability,
    p.persona,
    p.updated_at.slice(0, 19),
    p.state === 'failed' ? s.red(clip(p.validation?.summary ?? '', Math.max(20, width - 90))) : '',
  ]);
  const lines = table([[s.dim('ID'), s.dim('STATE'), s.dim('NAME'), s.dim('CAPABILITY'), s.dim('PERSONA'), s.dim('UPDATED'), ''], ...rows]);
  const waiting = list.filter((p) => p.state === 'validated').length;
  if (waiting > 0)
    lines.push(
      '',
      s.dim(`${waiting} awaiting approval: forge toolsmith show <id>, then forge toolsmith approve <id> (or reject <id> --reason …)`),
    );
  return lines;
}

const json = (v: unknown): string => JSON.stringify(v, null, 2);

/** One check of the validation record: `✓ example 1  12 ms  run r-…  answered as expected`. */
function checkLine(c: ValidationCheck, s: Style): string[] {
  const head = [
    c.ok ? s.green('✓') : s.red('✗'),
    s.dim(c.kind.padEnd(13)),
    s.bold(c.label),
    c.duration_ms !== undefined ? s.dim(ms(c.duration_ms)) : '',
    c.run_id ? s.dim(`run ${c.run_id}`) : '',
  ]
    .filter(Boolean)
    .join('  ');
  const lines = [`  ${head}`, `      ${c.ok ? c.verdict : s.red(c.verdict)}`];
  if (!c.ok) {
    if (c.input !== undefined) lines.push(`      ${s.dim('input ')} ${clip(JSON.stringify(c.input), 200)}`);
    if (c.expect !== undefined) lines.push(`      ${s.dim('expect')} ${clip(JSON.stringify(c.expect), 200)}`);
    if (c.output !== undefined) lines.push(`      ${s.dim('got   ')} ${clip(JSON.stringify(c.output), 200)}`);
  }
  return lines;
}

/** A proposal in full, for `forge toolsmith show`: everything an approver needs, in review order. */
export function reviewLines(r: ProposalReview, s: Style): string[] {
  const p = r.proposal;
  const lines = [
    `${s.bold(p.id)}  ${stateColour(p.state, s)}`,
    '',
    `${s.dim('capability')}  ${p.capability}`,
    `${s.dim('name      ')}  ${s.bold(p.name)} ${s.dim(`(${p.spec.runtime})`)}`,
    `${s.dim('persona   ')}  ${p.persona} ${s.dim(`(session ${p.session})`)}`,
    `${s.dim('gap       ')}  ${p.gap ? `${p.gap.kind} ${p.gap.signature}` : s.dim('none named')}`,
    `${s.dim('replaces  ')}  ${p.replaces ? `v${p.replaces.version} ${p.replaces.digest.slice(0, 19)}…${p.replaces.proposal ? ` (${p.replaces.proposal})` : ''}` : s.dim('nothing (a new tool)')}`,
    `${s.dim('live now  ')}  ${r.active ? `v${r.active.version} ${r.active.digest.slice(0, 19)}… ${r.active.proposal ? `(${r.active.proposal})` : '(not from a proposal)'}` : s.dim('none')}`,
  ];
  if (p.activated) lines.push(`${s.dim('activated ')}  v${p.activated.version} ${p.activated.at} by ${p.activated.by}`);
  if (p.spec.description) lines.push('', p.spec.description);
  lines.push('', s.dim('history'));
  for (const h of p.history)
    lines.push(`  ${h.at}  ${stateColour(h.state, s).padEnd(9)}  ${h.by}${h.reason ? `  ${s.dim(clip(h.reason, 160))}` : ''}`);
  lines.push('', s.dim('input_schema'), json(p.spec.input_schema));
  if (p.spec.output_schema) lines.push('', s.dim('output_schema'), json(p.spec.output_schema));
  if (p.spec.examples?.length) {
    lines.push('', s.dim('examples'));
    for (const e of p.spec.examples) lines.push(`  ${clip(JSON.stringify(e), 200)}`);
  }
  lines.push('', s.dim('impl'), p.spec.impl.trimEnd());
  if (r.impl_diff) {
    lines.push('', s.dim(`impl diff against the live v${r.active?.version} (- live, + proposed)`));
    for (const l of r.impl_diff.split('\n')) lines.push(l.startsWith('+ ') ? s.green(l) : l.startsWith('- ') ? s.red(l) : s.dim(l));
  } else if (r.active) lines.push('', s.dim('impl diff: the impl is the same as the live version'));
  const v = p.validation;
  lines.push('');
  if (!v) lines.push(s.dim('validation: not run yet'));
  else {
    lines.push(
      `${s.dim('validation')}  ${v.ok ? s.green('passed') : s.red('failed')}  ${s.dim(
        `${v.checks.length} checks, ${v.sandbox_runs} sandbox runs, ${ms(v.duration_ms)}, ${v.started_at}, runtime ${v.runtime}, policy ${v.policy_digest.slice(0, 19)}…`,
      )}`,
    );
    if (!v.ok) lines.push(`  ${s.red(v.summary)}`);
    for (const c of v.checks) lines.push(...checkLine(c, s));
  }
  lines.push('', s.dim(`gap history${r.gap_history.length ? ` (${r.gap_history.length}, newest last)` : ''}`));
  if (r.gap_history.length === 0) lines.push(`  ${s.dim('none')}`);
  for (const g of r.gap_history)
    lines.push(`  ${g.at}  ${g.source.padEnd(13)}  ${g.persona}${g.description ? `  ${s.dim(clip(g.description, 120))}` : ''}`);
  return lines;
}

/** `text.reverse  missing_tool  3 in window (5 held)  qualifies` rows. */
export function gapRows(gaps: readonly GapSummary[], s: Style): string[] {
  if (gaps.length === 0) return [s.dim('no gaps recorded in this project')];
  return table([
    [s.dim('SIGNATURE'), s.dim('KIND'), s.dim('IN WINDOW'), s.dim('HELD'), s.dim('LAST'), s.dim('PERSONAS'), s.dim('')],
    ...gaps.map((g) => [
      s.bold(g.signature),
      g.kind === 'service_absent' ? s.yellow(g.kind) : g.kind,
      String(g.count),
      String(g.total),
      new Date(g.last_at).toISOString().slice(0, 19),
      g.personas.join(','),
      g.qualifies ? (g.kind === 'service_absent' ? s.yellow('operator signal') : s.green('qualifies')) : s.dim('below threshold'),
    ]),
  ]);
}

/** What one cycle found, for `forge toolsmith cycle`. */
export function cycleLines(r: CycleReport, s: Style): string[] {
  const lines = [
    `${s.green('✓')} cycle at ${r.at}: ${r.wanted.length} wanted, ${r.service_absent.length} service absent, ${r.awaiting_approval} awaiting approval`,
  ];
  for (const w of r.wanted)
    lines.push(
      `  ${s.green('wanted')}          ${s.bold(w.signature)}  ${s.dim(`${w.count} in window${w.description ? `: ${clip(w.description, 100)}` : ''}`)}`,
    );
  for (const a of r.service_absent)
    lines.push(
      `  ${s.yellow('service absent')}  ${s.bold(a.signature)}  ${s.dim(`${a.count} start failures: check it in gateway.json (forge gateway list --probe)`)}`,
    );
  return lines;
}

/** One line for stderr when a periodic cycle finds something (nothing when it found nothing). */
export function cycleSummary(r: CycleReport): string | undefined {
  if (r.wanted.length === 0 && r.service_absent.length === 0) return undefined;
  const parts = [
    r.wanted.length ? `wanted: ${r.wanted.map((w) => `${w.signature} (${w.count})`).join(', ')}` : '',
    r.service_absent.length ? `service absent: ${r.service_absent.map((a) => `${a.signature} (${a.count})`).join(', ')}` : '',
    `${r.awaiting_approval} awaiting approval`,
  ].filter(Boolean);
  return `forge toolsmith cycle: ${parts.join('; ')}`;
}
