import type { DamagedTool, ListedTool, StoredTool } from '@forge/registry';
import type { Envelope, SourcedTool } from '@forge/runner';
import { clip, ms, type Style, table } from './output.js';

/**
 * `fib  project  v1  python3  The n-th Fibonacci number…` rows under a header; a damaged tool file
 * is a row marked DAMAGED with its file and what is wrong (it cannot be called until removed).
 */
export function toolRows(
  tools: readonly ListedTool[],
  s: Style,
  width = 100,
  sourced: readonly SourcedTool[] = [],
  damaged: readonly DamagedTool[] = [],
): string[] {
  if (tools.length === 0 && sourced.length === 0 && damaged.length === 0)
    return [s.dim('no forged tools (forge one: forge tools forge <spec.json|dir|->)')];
  const rows = tools.map((t) => [
    s.bold(t.tool.name),
    t.scope + (t.shadowedBy ? s.dim(` (hidden by ${t.shadowedBy})`) : ''),
    `v${t.tool.version}`,
    t.tool.runtime,
    clip(t.tool.description ?? '', Math.max(20, width - 50)),
  ]);
  for (const d of damaged) {
    rows.push([s.bold(d.name), d.scope, '-', s.red('DAMAGED'), `${d.path}: ${clip(d.reason, Math.max(20, width - 50))}`]);
  }
  rows.sort((a, b) => (a[0] as string).localeCompare(b[0] as string));
  for (const t of sourced) {
    rows.push([
      s.bold(t.name),
      `${t.origin.kind}:${t.origin.server}`,
      '-',
      t.origin.sandboxed ? 'mcp' : s.yellow('mcp, unsandboxed'),
      clip(t.description, Math.max(20, width - 50)),
    ]);
  }
  return table([[s.dim('NAME'), s.dim('SCOPE'), s.dim('VER'), s.dim('RUNTIME'), s.dim('DESCRIPTION')], ...rows]);
}

/** A tool in full, for `forge tools show`. */
export function toolDetail(t: StoredTool, scope: string, s: Style): string[] {
  const lines = [
    `${s.bold(t.name)} v${t.version} ${s.dim(`(${scope} scope, ${t.runtime})`)}`,
    t.description ?? '',
    '',
    `${s.dim('digest ')} ${t.digest}`,
    `${s.dim('created')} ${t.created_at} by ${t.created_by?.persona ?? '?'}${t.created_by?.session ? ` (session ${t.created_by.session})` : ''}`,
  ];
  if (t.meta && Object.keys(t.meta).length > 0) lines.push(`${s.dim('meta   ')} ${JSON.stringify(t.meta)}`);
  lines.push('', s.dim('input_schema'), JSON.stringify(t.input_schema, null, 2));
  if (t.output_schema) lines.push('', s.dim('output_schema'), JSON.stringify(t.output_schema, null, 2));
  lines.push('', s.dim('impl'), t.impl.trimEnd());
  return lines;
}

/** One line saying how a call went: `fib: ok in 23 ms (cache hit)` or `fib: validation_failed: …`. */
export function envelopeHeadline(name: string, e: Envelope, s: Style): string {
  const meta = (e.meta ?? {}) as { duration_ms?: number; cache?: string; run_id?: string };
  const how = [
    meta.duration_ms !== undefined ? `in ${ms(meta.duration_ms)}` : '',
    meta.cache && meta.cache !== 'off' ? `cache ${meta.cache}` : '',
  ]
    .filter(Boolean)
    .join(', ');
  if (e.ok) return `${s.green('✓')} ${s.bold(name)} ok${how ? ` ${s.dim(how)}` : ''}`;
  return `${s.red('✗')} ${s.bold(name)} ${s.red(e.error.kind)}: ${e.error.message}`;
}

/** A refusal from forgeTool/promoteTool/removeTool: `✗ name_taken: …`. */
export function refusalLine(r: { kind: string; message: string }, s: Style): string {
  return `${s.red('✗')} ${s.red(r.kind)}: ${r.message}`;
}
