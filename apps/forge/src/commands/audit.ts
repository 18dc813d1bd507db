import { existsSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { EnvironmentError, UsageError } from '../args.js';
import type { Command } from '../command.js';
import { clip } from '../output.js';

const logOf = (home: string) => join(home, 'audit', 'forge.log');

export const auditVerify: Command = {
  words: 'audit verify',
  usage: 'forge audit verify [--key-pub FILE]',
  summary: "verify forge's audit log ($FORGE_HOME/audit/forge.log); exit 1 naming the first bad entry",
  details: [
    '--key-pub FILE   trust only checkpoints signed by this Ed25519 public key (PEM; forge signs',
    '                 with the private key named by FORGE_AUDIT_KEY); at least one must exist',
  ],
  options: { 'key-pub': { type: 'string' } },
  async run({ values }, { out, where }) {
    const log = logOf((await where()).home);
    const { verifyLog } = await import('@forge/audit-chain');
    const keyFile = values['key-pub'] as string | undefined;
    let publicKey: string | undefined;
    if (keyFile !== undefined) {
      try {
        publicKey = readFileSync(keyFile, 'utf8');
      } catch (err) {
        throw new EnvironmentError(
          `--key-pub ${keyFile} cannot be read (${(err as NodeJS.ErrnoException).code}); give the .pub file "forge-audit keygen" wrote`,
        );
      }
    }
    // A log that is not there verifies nothing: a deleted log must not read as an empty, intact one.
    if (!existsSync(log)) {
      const message = `no audit log at ${log}; if forge has run with this FORGE_HOME, the log was removed — restore it from a copy`;
      if (out.json)
        out.data({ log, ok: false, entries: 0, first_bad: { seq: 1, line: 0, reason: 'log_missing', file: basename(log), message } });
      else out.line(`${out.style.red('✗')} ${message}`);
      return 1;
    }
    let r: Awaited<ReturnType<typeof verifyLog>>;
    try {
      r = await out.progress('verifying the audit log', verifyLog(log, publicKey ? { publicKey } : {}));
    } catch (err) {
      if ((err as { code?: string }).code === 'invalid_key') throw new EnvironmentError(`--key-pub ${keyFile}: ${(err as Error).message}`);
      throw err;
    }
    if (out.json) out.data({ log, ...r });
    else if (r.ok) {
      const cp = r.checkpoint
        ? `, checkpoint at entry ${r.checkpoint.entries}${r.checkpoint.signed ? ' (signed)' : ''}${r.uncheckpointed ? ` (+${r.uncheckpointed} after it)` : ''}`
        : ', no checkpoint';
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
    // A reader that went away (`| head -1`) ends the tail like Ctrl-C.
    const signal = AbortSignal.any([stop.signal, out.gone]);
    try {
      for await (const e of tailLog(log, { last: n, follow: values.follow === true, signal })) {
        if (out.gone.aborted) break;
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
