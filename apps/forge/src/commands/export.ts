import { resolve } from 'node:path';
import type { Forge } from '@forge/runner';
import type { Command, Io } from '../command.js';
import { callContext, openForge } from '../context.js';
import { untilSignal } from '../signals.js';
import { type ExportReport, exportCards, lockToolDir, prepareToolDir } from '../tool-dir.js';
import type { Launcher } from '../tool-files.js';
import type { Where } from '../where.js';

/** How long a watch lets changes settle before it writes (a forge touches several files). */
const SETTLE_MS = 100;

export const toolsExport: Command = {
  words: 'tools export',
  usage: 'forge tools export <dir> [--watch]',
  summary: 'keep a tool directory: per visible tool an executable <dir>/<name> and its control files in <dir>/<name>.d/',
  details: [
    '--watch   keep it up to date (forges, removals, promotions, policy and gateway pin changes) until',
    '          SIGINT/SIGTERM',
    '<dir>/<name> calls the tool through forge as whoever runs it (forge run <name> …); <name>.d/ holds',
    'name, description, schema, output_schema, cap, policy, status and origin, for the persona exporting.',
    "<dir> and every directory above it must be yours or root's and writable by no one else; names an",
    'export did not make are never touched (.forge-tools.json lists what it made).',
  ],
  options: { watch: { type: 'boolean' } },
  positionals: [1, 1],
  async run({ values, positionals }, io) {
    const w = await io.where();
    const target = resolve(positionals[0] as string);
    if (values.watch !== true) {
      const engine = await openForge(w, { calls: false });
      try {
        return print(io, await exportOnce(engine.forge, w, target, io.cliPath));
      } finally {
        await engine.close();
      }
    }
    return watch(io, w, target);
  },
};

async function exportOnce(f: Forge, w: Where, target: string, cli: string, locked?: string): Promise<ExportReport> {
  const ctx = callContext(w.env);
  const dir = locked ?? prepareToolDir(target, [f.paths.home, f.paths.projectForge, f.paths.vault]);
  const release = locked ? () => {} : lockToolDir(dir);
  try {
    const cards = await f.describeTools(ctx);
    const launcher: Launcher = { node: process.execPath, cli, home: w.home, project: w.project };
    return exportCards(dir, cards, launcher, f.caller(ctx).persona);
  } finally {
    release();
  }
}

function print(io: Io, r: ExportReport): number {
  const { out } = io;
  if (out.json) out.data({ ok: r.skipped.length === 0, ...r });
  else {
    out.line(
      `${out.style.green('✓')} ${r.dir}: ${r.written.length} written, ${r.unchanged} unchanged, ${r.removed.length} removed${r.skipped.length > 0 ? `, ${r.skipped.length} left out` : ''}`,
    );
    for (const s of r.skipped) out.note(`forge: ${s.name} left out: ${s.why}`);
  }
  return r.skipped.length === 0 ? 0 : 1;
}

/** Exports, then again after each change to what the persona sees, until a signal. */
async function watch(io: Io, w: Where, target: string): Promise<number> {
  const stop = untilSignal();
  try {
    const engine = await openForge(w, { calls: false, watch: true });
    const f = engine.forge;
    const dir = prepareToolDir(target, [f.paths.home, f.paths.projectForge, f.paths.vault]);
    const release = lockToolDir(dir);
    try {
      let pending: NodeJS.Timeout | undefined;
      let running: Promise<unknown> = Promise.resolve();
      const again = () => {
        running = running
          .then(() => exportOnce(f, w, target, io.cliPath, dir))
          .then(
            (r) => {
              if (r.written.length + r.removed.length + r.skipped.length > 0) print(io, r);
            },
            (err) => io.out.note(`forge: export to ${dir} failed: ${(err as Error).message}; the next change tries again`),
          );
      };
      const soon = () => {
        clearTimeout(pending);
        pending = setTimeout(again, SETTLE_MS);
      };
      const offTools = f.on('toolsChanged', soon);
      const offAudit = f.on('audit', (e) => {
        if (e.type.startsWith('policy.') || e.type.startsWith('gateway.')) soon();
      });
      print(io, await exportOnce(f, w, target, io.cliPath, dir));
      io.out.note(`forge: watching; ${dir} follows the tools ${f.caller(callContext(w.env)).persona} sees (Ctrl-C stops)`);
      await stop.promise;
      offTools();
      offAudit();
      clearTimeout(pending);
      await running;
      return 0;
    } finally {
      release();
      await engine.close();
    }
  } finally {
    stop.dispose();
  }
}
