import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { EnvironmentError, UsageError } from '../args.js';
import type { Command } from '../command.js';
import { clip } from '../output.js';

const logOf = (home: string) => join(home, 'audit', 'forge.log');

export const auditVerify: Command = {
  words: 'audit verify',
  usage: 'forge audit verify',
  summary: "verify forge's audit log ($FORGE_HOME/audit/forge.log); exit 1 naming the first bad entry",
  async run(_p, { out, where }) {
    const log = logOf((await where()).home);
    const { verifyLog } = await import('@forge/audit-chain');
    if (!existsSync(join(log, '..'))) throw new EnvironmentError(`no audit log at ${log}: forge has not run with this FORGE_HOME`);
    const r = await out.progress('verifying the audit log', verifyLog(log));
    if (out.json) out.data({ log, ...r });
    else if (r.ok) {
      const cp = r.checkpoint
        ? `, checkpoint at entry ${r.checkpoint.entries}${r.uncheckpointed ? ` (+${r.uncheckpointed} after it)` : ''}`
        : '';
      out.line(`${out.style.green('✓')} ${log}: ${r.entries} entries intact, head ${r.head.slice(0, 12)}…${cp}`);
    } else if (r.first_bad) {
      const b = r.first_bad;
      out.line(`${out.style.red('✗')} ${log}: entry ${b.seq} (${b.file} line ${b.line}) ${out.style.red(b.reason)}: ${b.message}`);
      out.line(`  ${r.entries} entries before it verify; everything from entry ${b.seq} on is untrusted`);
    }
    return r.ok ? 0 : 1;
  },
};

export const auditTail: Command = {
  words: 'audit tail',
  usage: 'forge audit tail [-n N] [-f]',
  summary: 'print the last entries of the audit log (verified as read); -f follows new ones',
  details: ['-n N       how many entries (default 20)', '-f         keep printing entries as they are appended, until Ctrl-C'],
  options: { lines: { type: 'string', short: 'n' }, follow: { type: 'boolean', short: 'f' } },
  async run({ values }, { out, where }) {
    const n = values.lines === undefined ? 20 : Number(values.lines);
    if (!Number.isInteger(n) || n < 0) throw new UsageError(`-n expects a whole number (got "${String(values.lines)}")`, this.usage);
    const log = logOf((await where()).home);
    const { tailLog } = await import('@forge/audit-chain');
    if (!existsSync(log)) throw new EnvironmentError(`no audit log at ${log}: forge has not run with this FORGE_HOME`);
    const stop = new AbortController();
    const onSignal = () => stop.abort();
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    try {
      for await (const e of tailLog(log, { last: n, follow: values.follow === true, signal: stop.signal })) {
        if (out.json) out.line(JSON.stringify(e));
        else
          out.line(
            `${out.style.dim(String(e.seq).padStart(5))} ${out.style.dim(e.ts)} ${out.style.cyan(e.type)} ${clip(JSON.stringify(e.data), 160)}`,
          );
      }
    } finally {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
    return 0;
  },
};
