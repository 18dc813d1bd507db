import { resolve } from 'node:path';
import { UsageError } from '../args.js';
import type { Command, Io } from '../command.js';
import { callContext, openForge } from '../context.js';
import { recordPrinter } from '../output.js';
import { followStop, untilSignal } from '../signals.js';
import { type ExportReport, lockToolDir, prepareToolDir } from '../tool-dir.js';
import { exportOnce, exportSummary, keepToolDir, LOG_ROWS, stateOf } from '../tool-dir-keeper.js';
import { type CallRow, callBook, formatRow, openCallLog, readCalls } from '../tool-log.js';
import type { Where } from '../where.js';

export const toolsExport: Command = {
  words: 'tools export',
  usage: 'forge tools export <dir> [--watch]',
  summary: 'keep a tool directory: per visible tool an executable <dir>/<name> and its control files in <dir>/<name>.d/',
  details: [
    '--watch   keep it up to date (forges, removals, promotions, calls, policy and gateway pin changes)',
    "          until SIGINT/SIGTERM; with --json, each export's report on a line of its own (JSON Lines)",
    '<dir>/<name> calls the tool through forge as whoever runs it (forge run <name> …); <name>.d/ holds',
    'name, description, schema, output_schema, cap, policy, status, origin and log (its latest calls,',
    'from the verified audit log), for the persona exporting.',
    "<dir> and every directory above it must be yours or root's and writable by no one else; names an",
    'export did not make are never touched (.forge-tools.json lists what it made).',
  ],
  options: { watch: { type: 'boolean' } },
  positionals: [1, 1],
  async run({ values, positionals }, io) {
    const w = await io.where();
    const target = resolve(positionals[0] as string);
    if (values.watch === true) return watch(io, w, target);
    const engine = await openForge(w, { calls: false });
    try {
      const f = engine.forge;
      const dir = prepareToolDir(target, stateOf(f));
      const release = await lockToolDir(dir);
      try {
        const src = await openCallLog(w);
        try {
          return print(io, await exportOnce(f, w, dir, io.cliPath, await callBook(src, LOG_ROWS)));
        } finally {
          if (src.kind === 'database') await src.close();
        }
      } finally {
        await release();
      }
    } finally {
      await engine.close();
    }
  },
};

/** One export's report; watching (`stream`), with --json, one JSON object per line per export. */
function print(io: Io, r: ExportReport, stream = false): number {
  const { out } = io;
  if (out.json && stream) out.jsonLine({ ok: r.skipped.length === 0, ...r });
  else if (out.json) out.data({ ok: r.skipped.length === 0, ...r });
  else {
    out.line(`${out.style.green('✓')} ${exportSummary(r)}`);
    for (const s of r.skipped) out.note(`forge: ${s.name} left out: ${s.why}`);
  }
  return r.skipped.length === 0 ? 0 : 1;
}

/** Exports, then keeps the directory current until a signal. */
async function watch(io: Io, w: Where, target: string): Promise<number> {
  const stop = untilSignal();
  try {
    const engine = await openForge(w, { calls: false, watch: true });
    try {
      const keeping = keepToolDir(engine.forge, w, target, io.cliPath, {
        report: (r) => print(io, r, true),
        note: (m) => io.out.note(m),
      });
      // A signal before the first export is done (a slow upstream listing) still stops it.
      const kept = await Promise.race([keeping, stop.promise.then(() => undefined)]);
      if (!kept) {
        io.out.note('forge: stopped before the first export finished');
        void keeping.then((k) => k.stop()).catch(() => {});
        return 0;
      }
      io.out.note(`forge: watching; ${kept.dir} follows the tools ${engine.forge.caller(callContext(w.env)).persona} sees (Ctrl-C stops)`);
      await stop.promise;
      await kept.stop();
      return 0;
    } finally {
      await engine.close();
    }
  } finally {
    stop.dispose();
  }
}

export const toolsLog: Command = {
  words: 'tools log',
  usage: 'forge tools log <name> [-n N] [-f]',
  summary: "one tool's calls from the audit log (verified first): time, persona, outcome, duration, run id",
  details: [
    '-n N   how many of its latest calls (default 20), among the last 10,000 entries',
    '-f     then print each new call as it is recorded (by any process, or any host on the same database), until Ctrl-C',
    '--json the calls as one JSON array; with -f, one call per line (JSON Lines), as they come',
    'The same rows are <dir>/<name>.d/log in an exported tool directory.',
  ],
  options: { lines: { type: 'string', short: 'n' }, follow: { type: 'boolean', short: 'f' } },
  positionals: [1, 1],
  async run({ values, positionals }, { out, where }) {
    const name = positionals[0] as string;
    const n = values.lines === undefined ? 20 : Number(values.lines);
    if (!Number.isInteger(n) || n < 1)
      throw new UsageError(`-n expects a whole number above 0 (got "${String(values.lines)}")`, this.usage);
    const w = await where();
    const src = await openCallLog(w);
    const { signal, dispose } = followStop(out.gone);
    const follow = values.follow === true;
    const print = recordPrinter<CallRow>(out, follow, (r) => formatRow(r, out.style));
    try {
      for await (const r of readCalls(src, { names: new Set([name]), perTool: n, follow, signal })) {
        if (out.gone.aborted) break;
        print.add(r);
      }
      print.end();
    } finally {
      dispose();
      if (src.kind === 'database') await src.close();
    }
    return 0;
  },
};
