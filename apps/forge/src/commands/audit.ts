import { createPublicKey } from 'node:crypto';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { AuditEntry } from '@forge/audit-chain';
import type { PostgresAuditLog } from '@forge/postgres';
import { EnvironmentError, UsageError } from '../args.js';
import type { Command } from '../command.js';
import { clip, type Output, recordPrinter } from '../output.js';
import { followStop } from '../signals.js';
import { openStore, storeUrl } from '../store.js';
import type { Where } from '../where.js';

const logOf = (home: string) => join(home, 'audit', 'forge.log');
/** The newest signed checkpoint, kept outside the log's directory (the engine writes it when FORGE_AUDIT_KEY is set). */
const anchorOf = (home: string) => join(home, 'audit.anchor');

/**
 * Whether the verified log still holds the entry the anchor file names: a log deleted or cut
 * together with its checkpoint file verifies as a shorter, intact chain, and only this copy,
 * kept elsewhere, remembers how long it was.
 */
async function behindAnchor(home: string, log: string, r: { entries: number }): Promise<string | undefined> {
  const file = anchorOf(home);
  if (!existsSync(file)) return undefined;
  const { parseCheckpoint, tailLog } = await import('@forge/audit-chain');
  const cp = parseCheckpoint(readFileSync(file, 'utf8').trim());
  if (typeof cp === 'string') return `the audit anchor ${file} is not a checkpoint (${cp}); it was changed`;
  if (cp.entries === 0) return undefined;
  const was = `the anchor ${file} (a signed checkpoint of ${cp.time}) says the log held ${cp.entries} entries, head ${cp.head.slice(0, 12)}…`;
  if (r.entries < cp.entries) return `${was}; ${log} now holds ${r.entries}: it was cut or replaced together with its checkpoints`;
  for await (const e of tailLog(log)) {
    if (e.seq === cp.entries)
      return e.hash === cp.head ? undefined : `${was}; entry ${cp.entries} of ${log} is another one: the log was rewritten`;
  }
  return `${was}; ${log} does not reach entry ${cp.entries}`;
}

/** The private key FORGE_AUDIT_KEY names (PEM), checked as the engine checks it; undefined when unset. */
export async function auditSigningKey(env: NodeJS.ProcessEnv): Promise<string | undefined> {
  const { readAuditKey } = await import('@forge/runner');
  try {
    return readAuditKey(env.FORGE_AUDIT_KEY, 'FORGE_AUDIT_KEY');
  } catch (err) {
    throw new EnvironmentError((err as Error).message);
  }
}

export const auditVerify: Command = {
  words: 'audit verify',
  usage: 'forge audit verify [--key-pub FILE [--witness VKEY]… [--quorum N] [--witnessed FILE]]',
  summary: "verify forge's audit log ($FORGE_HOME/audit/forge.log); exit 1 naming the first bad entry",
  details: [
    '--key-pub FILE   trust only checkpoints signed by this Ed25519 public key (PEM; forge signs',
    '                 with the private key named by FORGE_AUDIT_KEY); at least one must exist',
    '--witness VKEY   a witness whose cosignatures count: the log must hold the history the witnessed checkpoint',
    '                 names ($FORGE_HOME/audit.witnessed, or --witnessed FILE), cosigned by --quorum of them (default all)',
  ],
  options: {
    'key-pub': { type: 'string' },
    witness: { type: 'string', multiple: true },
    quorum: { type: 'string' },
    witnessed: { type: 'string' },
  },
  async run({ values }, { out, where }) {
    const w = await where();
    if (storeUrl(w.env)) return verifyDatabase(w, out);
    const log = logOf(w.home);
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
    const anchor = r.ok ? await behindAnchor(w.home, log, r) : undefined;
    if (anchor) {
      r = {
        ...r,
        ok: false,
        // forge's own reason beside the library's (as log_missing is): the chain verifies, the anchor does not.
        first_bad: { seq: r.entries + 1, line: 0, reason: 'behind_anchor', file: basename(log), message: anchor },
      } as unknown as typeof r;
    }
    // The tree beside the log, once it has published a checkpoint: its tiles and head against the
    // entries (with --key-pub, the checkpoint must be signed by that key).
    const tree = r.ok ? await verifyTree(log, publicKey) : undefined;
    if (tree && !tree.ok) r = { ...r, ok: false } as typeof r;
    const witnessKeys = (values.witness as string[] | undefined) ?? [];
    let witnessed: Awaited<ReturnType<typeof checkAgainstWitnesses>> | undefined;
    if (witnessKeys.length > 0) {
      if (!publicKey)
        throw new UsageError('--witness needs --key-pub: a witnessed checkpoint counts only when the log’s key signed it', this.usage);
      const quorum = values.quorum === undefined ? witnessKeys.length : Number(values.quorum);
      if (!Number.isInteger(quorum) || quorum < 1 || quorum > witnessKeys.length)
        throw new UsageError(`--quorum must be a whole number from 1 to ${witnessKeys.length} (the witnesses given)`, this.usage);
      const file = (values.witnessed as string | undefined) ?? join(w.home, 'audit.witnessed');
      witnessed = r.ok ? await checkAgainstWitnesses(log, r.entries, file, publicKey, witnessKeys, quorum) : undefined;
      if (witnessed && !witnessed.ok) r = { ...r, ok: false } as typeof r;
    }
    if (out.json) out.data({ log, ...r, ...(tree ? { tree } : {}), ...(witnessed ? { witnessed } : {}) });
    else if (witnessed && !witnessed.ok) {
      out.line(`${out.style.green('✓')} ${log}: ${r.entries} entries chain intact`);
      out.line(`${out.style.red('✗')} against the witnesses: ${out.style.red(witnessed.reason)}`);
    } else if (tree && !tree.ok) {
      out.line(`${out.style.green('✓')} ${log}: ${r.entries} entries intact`);
      out.line(
        `${out.style.red('✗')} its Merkle tree (${log}.tlog): ${tree.first_bad?.what}: ${out.style.red(tree.first_bad?.reason ?? '')}; the tiles are derived from the entries: a writer started on a log whose tree it does not trust rebuilds them`,
      );
    } else if (r.ok) {
      const cp = r.checkpoint
        ? `, checkpoint at entry ${r.checkpoint.entries}${r.checkpoint.signed ? ' (signed)' : ''}${r.uncheckpointed ? ` (+${r.uncheckpointed} after it)` : ''}`
        : ', no checkpoint';
      out.line(`${out.style.green('✓')} ${log}: ${r.entries} entries intact, head ${r.head.slice(0, 12)}…${cp}`);
      if (tree)
        out.line(
          `${out.style.green('✓')} its Merkle tree: ${tree.tiles} tiles and the ${tree.checkpoint} tree checkpoint of ${tree.size} entries as the entries give them`,
        );
      if (witnessed?.ok)
        out.line(`${out.style.green('✓')} it holds the history of ${witnessed.size} entries cosigned by ${witnessed.cosigners.join(', ')}`);
    } else if (r.first_bad) {
      const b = r.first_bad;
      out.line(`${out.style.red('✗')} ${log}: entry ${b.seq} (${b.file} line ${b.line}) ${out.style.red(b.reason)}: ${b.message}`);
      out.line(`  ${r.entries} entries before it verify; everything from entry ${b.seq} on is untrusted`);
    }
    return r.ok ? 0 : 1;
  },
};

/** The name forge's key signs the audit log's tree checkpoints under (the runner's AUDIT_KEY_NAME). */
export const AUDIT_KEY_NAME = 'forge-operator';

/**
 * The log against a checkpoint witnesses cosigned (`file`): signed by the log's key, cosigned by
 * `quorum` of `witnessKeys`, and the log's first entries are the history it names.
 */
async function checkAgainstWitnesses(
  log: string,
  entries: number,
  file: string,
  publicKey: string,
  witnessKeys: string[],
  quorum: number,
): Promise<{ ok: true; size: number; cosigners: string[] } | { ok: false; reason: string }> {
  const chain = await import('@forge/audit-chain');
  let note: string;
  try {
    note = readFileSync(file, 'utf8');
  } catch {
    return { ok: false, reason: `no witnessed checkpoint at ${file} (forge audit witness keeps one; a copy from a receipt serves too)` };
  }
  let w: ReturnType<typeof chain.checkWitnessed>;
  try {
    w = chain.checkWitnessed(note, [chain.noteVerifierKey(AUDIT_KEY_NAME, createPublicKey(publicKey))], witnessKeys, quorum);
  } catch (err) {
    throw new UsageError(`--witness: ${(err as Error).message}`, auditVerify.usage);
  }
  if (!w.ok) return { ok: false, reason: `${file}: ${w.reason}` };
  if (entries < w.size)
    return {
      ok: false,
      reason: `the log holds ${entries} entries, fewer than the ${w.size} the witnesses cosigned: it was cut after they saw it`,
    };
  const head = await chain.logTreeHead(log, w.size, { threads: 2 });
  if (!Buffer.from(head.root).equals(Buffer.from(w.root)))
    return {
      ok: false,
      reason: `the log's first ${w.size} entries are not the history the witnesses cosigned: it was rewritten after they saw it`,
    };
  return { ok: true, size: w.size, cosigners: w.cosigners };
}

/** The tree beside the file log checked against it, when it has a tree checkpoint (else undefined). */
async function verifyTree(log: string, publicKey: string | undefined) {
  if (!existsSync(`${log}.tlog/checkpoint`)) return undefined;
  const chain = await import('@forge/audit-chain');
  const keys = publicKey ? [chain.noteVerifierKey(AUDIT_KEY_NAME, createPublicKey(publicKey))] : [];
  return chain.verifyTiles(log, { verifierKeys: keys, threads: 2 });
}

export const auditAnchor: Command = {
  words: 'audit anchor',
  usage: 'forge audit anchor --reason TEXT',
  summary: 'sign over the audit log as it is now, after checking it: the one way past log_unanchored and log_behind_checkpoint',
  details: [
    'With FORGE_AUDIT_KEY set, forge refuses a log no checkpoint signed by that key covers (its',
    'checkpoints removed, or a log that was never signed) and a log behind its newest checkpoint.',
    'After checking it (forge audit verify), this appends audit.reanchored recording what the log',
    'holds, the last signed checkpoint and how many of its entries are missing, and the reason,',
    'then signs a new checkpoint (also copied to $FORGE_HOME/audit.anchor).',
    '--reason TEXT   what was checked and why the log is kept as it is (recorded in the log)',
  ],
  options: { reason: { type: 'string' } },
  async run({ values }, { out, where }) {
    const w = await where();
    if (storeUrl(w.env))
      throw new UsageError('anchor re-signs the file log of this host; the database log keeps its own checkpoints', this.usage);
    const reason = values.reason as string | undefined;
    if (!reason || reason.trim() === '')
      throw new UsageError('give --reason: what was checked and why the log is kept (it is recorded)', this.usage);
    const key = await auditSigningKey(w.env);
    if (!key)
      throw new EnvironmentError('set FORGE_AUDIT_KEY to the private key forge signs checkpoints with; an unsigned log needs no anchor');
    const log = logOf(w.home);
    if (!existsSync(log)) throw new EnvironmentError(`no audit log at ${log}: nothing to anchor`);
    const { reanchorAuditLog } = await import('@forge/audit-chain');
    const r = await reanchorAuditLog(log, { signingKey: key, reason, anchorFile: anchorOf(w.home), tree: { keyName: AUDIT_KEY_NAME } });
    if (out.json) out.data({ file: log, ...r });
    else {
      const last = r.last_signed_checkpoint;
      const was = last
        ? `the last signed checkpoint covered ${last.entries} entries${r.held ? ', and the log holds them' : `: ${r.missing_entries} are missing`}`
        : 'no checkpoint signed by this key covered it';
      out.line(`${out.style.green('✓')} ${log}: anchored at ${r.log.entries} entries (${was})`);
      out.line(`  recorded audit.reanchored and signed a checkpoint at entry ${r.checkpoint.entries}`);
    }
    return 0;
  },
};

export const auditTail: Command = {
  words: 'audit tail',
  usage: 'forge audit tail [-n N] [-f]',
  summary: 'print the last entries of the audit log (verified as read); -f follows new ones',
  details: [
    '-n N       how many entries (default 20)',
    '-f         keep printing entries as they are appended (with --store postgres://…, as any host commits them), until Ctrl-C',
    '--json     the entries as one JSON array; with -f, one entry per line (JSON Lines), as they come',
  ],
  options: { lines: { type: 'string', short: 'n' }, follow: { type: 'boolean', short: 'f' } },
  async run({ values }, { out, where }) {
    const n = values.lines === undefined ? 20 : Number(values.lines);
    if (!Number.isInteger(n) || n < 0) throw new UsageError(`-n expects a whole number (got "${String(values.lines)}")`, this.usage);
    const w = await where();
    if (storeUrl(w.env)) return tailDatabase(w, n, values.follow === true, out);
    const log = logOf(w.home);
    const { tailLog } = await import('@forge/audit-chain');
    if (!existsSync(log)) throw new EnvironmentError(`no audit log at ${log}: forge has not run with this FORGE_HOME`);
    // A reader that went away (`| head -1`) ends the tail like Ctrl-C.
    const { signal, dispose } = followStop(out.gone);
    const print = entryPrinter(out, values.follow === true);
    try {
      for await (const e of tailLog(log, { last: n, follow: values.follow === true, signal })) {
        if (out.gone.aborted) break;
        print.add(e);
      }
      print.end();
    } finally {
      dispose();
    }
    return 0;
  },
};

export const auditExport: Command = {
  words: 'audit export',
  usage: 'forge audit export FILE [--force]',
  summary: "write the database's audit log (--store postgres://…) to FILE, as a file log forge-audit verifies byte for byte",
  details: [
    'FILE gets every entry, in order, as the exact line stored; FILE.checkpoints gets the checkpoints.',
    'The copy is verified (forge audit verify on a file log) before this command says it is done.',
    '--force   replace FILE (and FILE.checkpoints) when they exist',
    'The file log of one host needs no export: it is a file already ($FORGE_HOME/audit/forge.log).',
  ],
  positionals: [1, 1],
  options: { force: { type: 'boolean' } },
  async run({ values, positionals }, { out, where }) {
    const file = positionals[0] as string;
    const w = await where();
    if (!storeUrl(w.env))
      throw new UsageError(
        `the audit log of this host is a file already (${logOf(w.home)}): copy it with its .checkpoints file; export is for --store postgres://…`,
        this.usage,
      );
    if (existsSync(file) && values.force !== true)
      throw new EnvironmentError(`${file} exists: pass --force to replace it, or name another file`);
    const store = await openStore(w);
    try {
      if (values.force === true) for (const f of [file, `${file}.checkpoints`]) rmSync(f, { force: true });
      const r = await out.progress('exporting the audit log', (store.exportAudit as NonNullable<typeof store.exportAudit>)(file));
      const { verifyLog } = await import('@forge/audit-chain');
      const v = await out.progress('verifying the copy', verifyLog(file));
      if (out.json) out.data({ file, store: store.where, ...r, verified: v });
      else if (v.ok)
        out.line(
          `${out.style.green('✓')} ${file}: ${r.entries} entries and ${r.checkpoints} checkpoint(s) from ${store.where} (${r.bytes} bytes), verified`,
        );
      else out.line(`${out.style.red('✗')} ${file}: the copy does not verify: ${JSON.stringify(v.first_bad)}`);
      return v.ok ? 0 : 1;
    } finally {
      await store.close();
    }
  },
};

/** `forge audit verify` over a database: the chain checked inside it, in one snapshot. */
async function verifyDatabase(w: Where, out: Output): Promise<number> {
  const store = await openStore(w);
  try {
    const r = await out.progress('verifying the audit log', (store.verifyAudit as NonNullable<typeof store.verifyAudit>)());
    if (out.json) out.data({ store: store.where, ...r });
    else if (r.ok) out.line(`${out.style.green('✓')} ${store.where}: ${r.entries} entries intact, head ${r.head.slice(0, 12)}…`);
    else if (r.first_bad) {
      const b = r.first_bad;
      out.line(`${out.style.red('✗')} ${store.where}: entry ${b.seq} ${out.style.red(b.reason)}: ${b.message}`);
      out.line(`  ${r.entries} entries before it verify; everything from entry ${b.seq} on is untrusted`);
    }
    return r.ok ? 0 : 1;
  } finally {
    await store.close();
  }
}

/** `forge audit tail -n N` over a database. */
async function tailDatabase(w: Where, n: number, follow: boolean, out: Output): Promise<number> {
  const store = await openStore(w);
  // A reader that went away (`| head -1`) ends the tail like Ctrl-C.
  const { signal, dispose } = followStop(out.gone);
  const print = entryPrinter(out, follow);
  try {
    const { audit } = store.forgeOptions([]) as { audit: PostgresAuditLog };
    const head = await audit.head();
    // The last n entries at the head, then, following, each one any host commits after it.
    for await (const e of audit.entries({ from: Math.max(1, head.seq - n + 1), follow, signal })) {
      if (out.gone.aborted || (!follow && e.seq > head.seq)) break;
      print.add(e);
    }
    print.end();
    return 0;
  } finally {
    dispose();
    await store.close();
  }
}

/** `audit tail`'s printer: see {@link recordPrinter}. */
function entryPrinter(out: Output, follow: boolean) {
  return recordPrinter<AuditEntry>(
    out,
    follow,
    (e) =>
      `${out.style.dim(String(e.seq).padStart(5))} ${out.style.dim(e.ts)} ${out.style.cyan(e.type)} ${clip(JSON.stringify(e.data), 160)}`,
  );
}
