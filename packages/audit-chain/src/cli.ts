#!/usr/bin/env node
import { createPublicKey } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { parseArgs } from 'node:util';
import { loadKey } from './checkpoint.js';
import { guardStdout } from './cli-stdout.js';
import { AuditError } from './errors.js';
import type { AuditEntry } from './format.js';
import type { JsonValue } from './ijson.js';
import { generateSigningKeys, openAuditLog, reanchorAuditLog, tailLog, verifyLog, verifyTiles } from './index.js';
import { noteVerifierKey } from './note.js';
import { checkProof, type ProofVerdict } from './proof.js';

const USAGE = `usage: forge-audit <command> …

  append <log> <type> [<json-data>]         append one entry; prints its seq and hash
  verify <log> [--key-pub <file>] [--threads 2] [--json]
                                            check the chain and checkpoints (exit 0 intact, 1 violation)
  tail <log> [-n N] [-f] [--json]           print the last N entries (default 10); -f follows
  checkpoint <log> [--key <file>]           record (entries, head) beside the log, signed with --key
  anchor <log> --key <file> --reason <text> [--anchor-file <file>]
                                            sign over a log no checkpoint of this key covers (its first
                                            signing, or after a cut): records audit.reanchored first
  rotate <log>                              seal the active segment and start the next
  keygen <prefix>                           write <prefix>.key (private, 0600) and <prefix>.pub
  vkey <pub-file> --name <key-name>         print the verifier key of a public key (for signed notes)
  verify-proof <checkpoint> <proof> (--vkey <key> | --key-pub <file> --name <key-name>) [--json]
                                            check an inclusion or consistency proof against a signed
                                            tree checkpoint, offline (exit 0 proven, 1 not)
  verify-tiles <log> [--vkey <key> | --key-pub <file> --name <key-name>] [--threads 2] [--json]
                                            check the tiles and tree checkpoint beside the log
                                            (<log>.tlog/) against its entries (exit 0 match, 1 not)

Exit codes: 0 ok, 1 verification found a violation, 2 usage or I/O error.`;

class UsageError extends Error {}

const stdout = guardStdout();

function out(s: string): void {
  stdout.line(s);
}

function count(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

function short(hash: string): string {
  return `${hash.slice(0, 12)}…`;
}

function need(args: string[], n: number, what: string): void {
  if (args.length < n) throw new UsageError(`missing ${what}`);
}

const OPTIONS = {
  json: { type: 'boolean', default: false },
  'key-pub': { type: 'string' },
  key: { type: 'string' },
  reason: { type: 'string' },
  'anchor-file': { type: 'string' },
  threads: { type: 'string' },
  n: { type: 'string', short: 'n' },
  follow: { type: 'boolean', short: 'f', default: false },
  help: { type: 'boolean', short: 'h', default: false },
  name: { type: 'string' },
  vkey: { type: 'string', multiple: true },
} as const;

/** The parsed options every command reads from. */
type Values = ReturnType<typeof parseArgs<{ args: string[]; allowPositionals: true; options: typeof OPTIONS }>>['values'];

/** A command: its positional arguments and the options in, the exit code out. */
type Command = (args: string[], values: Values) => Promise<number>;

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args: argv, allowPositionals: true, options: OPTIONS });
  const [command, ...args] = positionals;
  if (values.help || !command) {
    out(USAGE);
    return values.help ? 0 : 2;
  }
  const run = COMMANDS.get(command);
  if (!run) throw new UsageError(`unknown command "${command}"`);
  return run(args, values);
}

/** `append`: one entry, durable before its seq and hash are printed. */
async function appendCommand(args: string[], values: Values): Promise<number> {
  need(args, 2, '<log> <type>');
  let data: JsonValue = null;
  if (args[2] !== undefined) {
    try {
      data = JSON.parse(args[2]) as JsonValue;
    } catch (err) {
      throw new UsageError(`<json-data> is not JSON: ${(err as Error).message}`);
    }
  }
  const log = await openAuditLog(args[0] as string);
  try {
    const r = await log.append(args[1] as string, data);
    out(values.json ? JSON.stringify(r) : `seq ${r.seq} hash ${r.hash}`);
  } finally {
    await log.close();
  }
  return 0;
}

/** `--threads`: 1 (the default) or 2 (a helper thread hashes too, for a large log). */
function threadsOf(values: Values): 1 | 2 {
  const threads = values.threads === undefined ? 1 : Number(values.threads);
  if (threads !== 1 && threads !== 2) throw new UsageError(`--threads must be 1 or 2 (got ${values.threads})`);
  return threads;
}

/** `verify`: the chain and its checkpoints; exit 0 intact, 1 with the first bad entry. */
async function verifyCommand(args: string[], values: Values): Promise<number> {
  need(args, 1, '<log>');
  const publicKey = values['key-pub'] ? await loadKey(values['key-pub'], 'public') : undefined;
  const r = await verifyLog(args[0] as string, { threads: threadsOf(values), ...(publicKey ? { publicKey } : {}) });
  if (values.json) {
    const { ok, entries, head, first_bad } = r;
    out(
      JSON.stringify(
        first_bad
          ? { ok, entries, head, first_bad }
          : { ok, entries, head, checkpoint: r.checkpoint ?? null, uncheckpointed: r.uncheckpointed },
      ),
    );
  } else if (r.ok) {
    const cp = r.checkpoint
      ? `; checkpoint at entry ${r.checkpoint.entries} (${r.checkpoint.signed ? `signed by ${r.checkpoint.key_id}` : 'unsigned'}), ${count(r.uncheckpointed, 'entry', 'entries')} not yet checkpointed`
      : '; no checkpoint yet';
    out(`ok: ${count(r.entries, 'entry', 'entries')} in ${count(r.segments, 'segment', 'segments')}, head ${short(r.head)}${cp}`);
  } else {
    const b = r.first_bad as NonNullable<typeof r.first_bad>;
    const inLog = b.file === basename(args[0] as string);
    const at = b.line === 0 ? '' : inLog ? `line ${b.line}` : `${b.file} line ${b.line}`;
    if (b.seq === 0) out(`${b.file}${b.line ? ` line ${b.line}` : ''}: ${b.message}`);
    else out(`entry ${b.seq}${at ? ` (${at})` : ''}: ${b.message}`);
    out(`verified ${r.entries} entries before it; reason: ${b.reason}`);
  }
  return r.ok ? 0 : 1;
}

/** `tail`: the last entries, following the log with -f until interrupted or the reader goes. */
async function tailCommand(args: string[], values: Values): Promise<number> {
  need(args, 1, '<log>');
  const last = values.n === undefined ? 10 : Number(values.n);
  if (!Number.isSafeInteger(last) || last < 0) throw new UsageError(`-n must be a non-negative integer (got ${values.n})`);
  const ac = new AbortController();
  const stop = () => ac.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  // A reader that went away (`| head -1`) ends the tail like Ctrl-C.
  const signal = AbortSignal.any([ac.signal, stdout.gone]);
  try {
    for await (const e of tailLog(args[0] as string, { last, follow: values.follow, signal })) {
      if (stdout.gone.aborted) break;
      out(values.json ? JSON.stringify(e) : formatEntry(e));
    }
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }
  return 0;
}

/** `checkpoint`: (entries, head) recorded beside the log, signed with --key. */
async function checkpointCommand(args: string[], values: Values): Promise<number> {
  need(args, 1, '<log>');
  const signingKey = values.key ? await loadKey(values.key, 'private') : undefined;
  const log = await openAuditLog(args[0] as string, signingKey ? { signingKey } : {});
  try {
    const cp = await log.checkpoint();
    out(
      values.json
        ? JSON.stringify(cp)
        : `checkpoint: ${cp.entries} entries, head ${short(cp.head)}${cp.sig ? `, signed by ${cp.key_id}` : ', unsigned'}`,
    );
  } finally {
    await log.close();
  }
  return 0;
}

/** `anchor`: audit.reanchored recorded, then a checkpoint signed over the log as it is. */
async function anchorCommand(args: string[], values: Values): Promise<number> {
  need(args, 1, '<log>');
  if (!values.key) throw new UsageError('anchor needs --key <file>: the key that signs the new checkpoint');
  if (!values.reason) throw new UsageError('anchor needs --reason <text>: what was checked and why the log is kept (it is recorded)');
  const signingKey = await loadKey(values.key, 'private');
  const r = await reanchorAuditLog(args[0] as string, {
    signingKey,
    reason: values.reason,
    ...(values['anchor-file'] ? { anchorFile: values['anchor-file'] } : {}),
  });
  const was = r.last_signed_checkpoint
    ? `the last checkpoint this key signed covered ${r.last_signed_checkpoint.entries} entries${r.held ? ' and the log holds it' : `; ${r.missing_entries} of them are missing`}`
    : 'no checkpoint of this key covered it';
  out(
    values.json
      ? JSON.stringify(r)
      : `anchored: ${r.log.entries} entries (${was}); recorded audit.reanchored and signed a checkpoint at entry ${r.checkpoint.entries} (${r.checkpoint.key_id})`,
  );
  return 0;
}

/** `rotate`: the active segment sealed and the next started. */
async function rotateCommand(args: string[], values: Values): Promise<number> {
  need(args, 1, '<log>');
  const log = await openAuditLog(args[0] as string);
  try {
    const r = await log.rotate();
    out(values.json ? JSON.stringify(r) : `sealed segment ${r.sealed} as ${r.path}`);
  } finally {
    await log.close();
  }
  return 0;
}

/** `keygen`: a new signing key pair, never over an existing one. */
async function keygenCommand(args: string[], values: Values): Promise<number> {
  need(args, 1, '<prefix>');
  const keys = generateSigningKeys();
  const prefix = args[0] as string;
  const taken = [`${prefix}.key`, `${prefix}.pub`].filter((f) => existsSync(f));
  if (taken.length > 0) {
    throw new AuditError(
      'io_error',
      `${taken.join(' and ')} already exist${taken.length === 1 ? 's' : ''}: refusing to overwrite an existing key; pick another prefix`,
    );
  }
  await writeFile(`${prefix}.key`, keys.privateKey, { mode: 0o600, flag: 'wx' });
  await writeFile(`${prefix}.pub`, keys.publicKey, { mode: 0o644, flag: 'wx' });
  out(
    values.json
      ? JSON.stringify({ key: `${prefix}.key`, pub: `${prefix}.pub` })
      : `wrote ${prefix}.key (keep it away from the log's writers) and ${prefix}.pub`,
  );
  return 0;
}

/** The verifier key of `--key-pub` under `--name`. */
async function verifierKeyOf(values: Values): Promise<string> {
  if (!values['key-pub'] || !values.name) throw new UsageError('give --vkey <key>, or --key-pub <file> with --name <key-name>');
  const pem = await readFile(values['key-pub'], 'utf8').catch((err: Error) => {
    throw new AuditError('io_error', `cannot read ${values['key-pub']}: ${err.message}`);
  });
  try {
    return noteVerifierKey(values.name, createPublicKey(pem));
  } catch (err) {
    throw new AuditError('invalid_key', `${values['key-pub']} is not an Ed25519 public key usable for notes: ${(err as Error).message}`);
  }
}

/** `vkey`: the verifier key a checker of signed notes is given. */
async function vkeyCommand(args: string[], values: Values): Promise<number> {
  need(args, 1, '<pub-file>');
  out(await verifierKeyOf({ ...values, 'key-pub': args[0] }));
  return 0;
}

/** `verify-proof`: a proof against a signed tree checkpoint, with nothing but the key. */
async function verifyProofCommand(args: string[], values: Values): Promise<number> {
  need(args, 2, '<checkpoint> <proof>');
  const [cpFile, proofFile] = args as [string, string];
  const keys = values.vkey && values.vkey.length > 0 ? values.vkey : [await verifierKeyOf(values)];
  const read = (f: string) =>
    readFile(f, 'utf8').catch((err: Error) => {
      throw new AuditError('io_error', `cannot read ${f}: ${err.message}`);
    });
  const [checkpoint, proofText] = await Promise.all([read(cpFile), read(proofFile)]);
  let doc: unknown;
  try {
    doc = JSON.parse(proofText);
  } catch (err) {
    throw new UsageError(`${proofFile} is not JSON: ${(err as Error).message}`);
  }
  let verdict: ProofVerdict;
  try {
    verdict = checkProof(checkpoint, doc, keys);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  out(values.json ? JSON.stringify(verdict) : verdict.ok ? `proven: ${verdict.proves}` : `NOT proven: ${verdict.reason}`);
  return verdict.ok ? 0 : 1;
}

/** `verify-tiles`: the tree beside a log against its entries. */
async function verifyTilesCommand(args: string[], values: Values): Promise<number> {
  need(args, 1, '<log>');
  const keys = values.vkey && values.vkey.length > 0 ? values.vkey : values['key-pub'] ? [await verifierKeyOf(values)] : [];
  const v = await verifyTiles(args[0] as string, { verifierKeys: keys, threads: threadsOf(values) });
  if (values.json) out(JSON.stringify(v));
  else if (v.ok)
    out(
      `ok: ${count(v.size, 'entry', 'entries')}, ${count(v.tiles, 'tile', 'tiles')} as the entries give them; tree checkpoint: ${v.checkpoint}`,
    );
  else
    out(
      `MISMATCH: ${v.first_bad?.what}: ${v.first_bad?.reason} (after ${count(v.size, 'entry', 'entries')}, ${count(v.tiles, 'tile', 'tiles')})`,
    );
  return v.ok ? 0 : 1;
}

const COMMANDS = new Map<string, Command>([
  ['append', appendCommand],
  ['verify', verifyCommand],
  ['tail', tailCommand],
  ['checkpoint', checkpointCommand],
  ['anchor', anchorCommand],
  ['rotate', rotateCommand],
  ['keygen', keygenCommand],
  ['vkey', vkeyCommand],
  ['verify-proof', verifyProofCommand],
  ['verify-tiles', verifyTilesCommand],
]);

function formatEntry(e: AuditEntry): string {
  return `#${e.seq} ${e.ts} ${e.type} ${JSON.stringify(e.data)}`;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    if (err instanceof UsageError || (err as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
      process.stderr.write(`forge-audit: ${(err as Error).message}\n\n${USAGE}\n`);
    } else if (err instanceof AuditError) {
      process.stderr.write(`forge-audit: ${err.message}\n`);
    } else if ((err as NodeJS.ErrnoException).code === 'EEXIST') {
      process.stderr.write(`forge-audit: ${(err as Error).message}: refusing to overwrite an existing key\n`);
    } else {
      process.stderr.write(`forge-audit: ${(err as Error).stack ?? String(err)}\n`);
    }
    process.exitCode = 2;
  },
);
