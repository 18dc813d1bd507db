#!/usr/bin/env node
// The forge demo, for now the audit log at work: several processes append to one log, a signed
// checkpoint pins it, verification passes, then copies are tampered with in different ways and
// each change is caught at the entry where it happened. Run with `bash scripts/demo.sh`.

import { execFile, spawn } from 'node:child_process';
import { copyFile, mkdtemp, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const root = new URL('..', import.meta.url).pathname;
const lib = join(root, 'packages/audit-chain/dist/index.js');
const cli = join(root, 'packages/audit-chain/dist/cli.js');
const { openAuditLog, verifyLog, generateSigningKeys } = await import(lib);
const run = promisify(execFile);

const tty = process.stdout.isTTY;
const bold = (s) => (tty ? `\x1b[1m${s}\x1b[0m` : s);
const dim = (s) => (tty ? `\x1b[2m${s}\x1b[0m` : s);
const red = (s) => (tty ? `\x1b[31m${s}\x1b[0m` : s);
const green = (s) => (tty ? `\x1b[32m${s}\x1b[0m` : s);
const say = (s = '') => console.log(s);

/** Runs `forge-audit verify` and returns its first output line and exit code. */
async function verifyCli(path, extra = []) {
  try {
    const { stdout } = await run(process.execPath, [cli, 'verify', path, ...extra]);
    return { code: 0, line: stdout.trim().split('\n')[0] };
  } catch (err) {
    return {
      code: err.code,
      line: String(err.stdout || err.stderr)
        .trim()
        .split('\n')[0],
    };
  }
}

function splitLines(buf) {
  const out = [];
  for (let i = 0; i < buf.length; ) {
    const nl = buf.indexOf(10, i);
    out.push(buf.subarray(i, nl + 1));
    i = nl + 1;
  }
  return out;
}

const dir = await mkdtemp(join(tmpdir(), 'forge-demo-'));
try {
  const log = join(dir, 'audit.log');
  say(bold('forge demo — a tamper-evident audit log (@forge/audit-chain)'));
  say(dim(`log: ${log}`));
  say();

  // 1. Several processes append at once; every acknowledged entry is durable.
  const writers = 3;
  const each = 200;
  const t0 = performance.now();
  const code = `
    const { openAuditLog } = await import(${JSON.stringify(lib)});
    const log = await openAuditLog(${JSON.stringify(log)});
    const id = Number(process.argv[1]);
    await Promise.all(Array.from({ length: ${each} }, (_, i) =>
      log.append('forge.called', { tool: 'code.csv_filter', writer: id, call: i, ok: i % 9 !== 0 })));
    await log.close();`;
  await Promise.all(
    Array.from(
      { length: writers },
      (_, id) =>
        new Promise((resolve, reject) => {
          const p = spawn(process.execPath, ['--input-type=module', '-e', code, String(id)], { stdio: 'inherit' });
          p.on('exit', (c) => (c === 0 ? resolve() : reject(new Error(`writer ${id} exited ${c}`))));
        }),
    ),
  );
  say(`1. ${writers} processes appended ${writers * each} entries to one log in ${Math.round(performance.now() - t0)} ms`);

  // 2. A checkpoint, signed with a key the writers of the log would not hold in production.
  const keys = generateSigningKeys();
  await writeFile(join(dir, 'signer.pub'), keys.publicKey);
  const w = await openAuditLog(log, { signingKey: keys.privateKey });
  const cp = await w.checkpoint();
  await w.append('demo.after_checkpoint', { note: 'entries after a checkpoint are reported as not yet checkpointed' });
  await w.close();
  say(`2. signed checkpoint: ${cp.entries} entries, head ${cp.head.slice(0, 12)}…, key ${cp.key_id}`);

  // 3. Verify.
  const ok = await verifyCli(log, ['--key-pub', join(dir, 'signer.pub')]);
  say(`3. forge-audit verify → ${green(ok.line)}`);
  say();

  // 4. Tamper with copies, one change each.
  say('4. tampering with copies of the log, one change each:');
  const original = await readFile(log);
  const lines = splitLines(original);
  const tamper = async (label, fn, extra = []) => {
    const copy = join(dir, 'copy.log');
    await rm(join(dir, 'copy.log.checkpoints'), { force: true });
    await copyFile(join(dir, 'audit.log.checkpoints'), join(dir, 'copy.log.checkpoints'));
    await writeFile(copy, original);
    await fn(copy);
    const r = await verifyCli(copy, extra);
    say(`   ${label.padEnd(46)} → ${r.code === 0 ? green(r.line) : red(r.line)}`);
  };
  await tamper('flip one bit in entry 120', async (p) => {
    const b = Buffer.from(original);
    const at = lines.slice(0, 119).reduce((n, l) => n + l.length, 0) + 40;
    b[at] ^= 1;
    await writeFile(p, b);
  });
  await tamper('delete entry 57', (p) => writeFile(p, Buffer.concat(lines.filter((_, i) => i !== 56))));
  await tamper('swap entries 300 and 301', (p) => {
    const l = [...lines];
    [l[299], l[300]] = [l[300], l[299]];
    return writeFile(p, Buffer.concat(l));
  });
  await tamper('cut the last 50 entries', (p) => truncate(p, Buffer.concat(lines.slice(0, -50)).length));
  await tamper('cut in the middle of entry 590', (p) => truncate(p, Buffer.concat(lines.slice(0, 589)).length + 30));

  // The strongest attack on a hash chain: edit an entry, re-hash everything after it, and rewrite
  // the checkpoint file to match. Nothing inside the files can tell; a signed checkpoint can.
  const { createHash } = await import('node:crypto');
  const rewrite = async (p) => {
    let prev;
    const out = lines.map((line, i) => {
      if (i < 9) return line;
      const text = line.toString().slice(0, -76 - 74);
      const edited = i === 9 ? text.replace(/"ok":(true|false)/, (_, v) => `"ok":${v === 'true' ? 'false' : 'true'}`) : text;
      const body = `${edited},"prev":"${prev ?? line.toString().slice(-76 - 65, -76 - 1)}"`;
      prev = createHash('sha256').update(body).digest('hex');
      return Buffer.from(`${body},"hash":"${prev}"}\n`);
    });
    await writeFile(p, Buffer.concat(out));
    // A checkpoint file that agrees with the forged history (unsigned: the key is not at hand).
    const head = out[cp.entries - 1].toString().slice(-76 + 9, -3);
    const offset = Buffer.concat(out.slice(0, cp.entries)).length;
    await writeFile(`${p}.checkpoints`, `${JSON.stringify({ entries: cp.entries, head, segment: 1, offset, time: cp.time })}\n`);
  };
  await tamper('edit entry 10, re-hash the rest, fix checkpoint', rewrite);
  await tamper('  … the same, verified with the signer key', rewrite, ['--key-pub', join(dir, 'signer.pub')]);
  say(dim('   (without a key, a consistent rewrite of log and checkpoints is undetectable: see SPEC.md section 9)'));
  say();

  // 5. Crash safety: a torn last line is moved aside and recorded by the next writer.
  await writeFile(log, Buffer.concat([original, Buffer.from('{"seq":602,"ts":"2026-11-30T')]));
  const torn = await verifyCli(log);
  say(`5. a writer crashed mid-line → ${red(torn.line)}`);
  const again = await openAuditLog(log);
  await again.close();
  const after = await verifyLog(log, { publicKey: keys.publicKey });
  const last = splitLines(await readFile(log))
    .at(-1)
    .toString();
  say(`   reopened: torn bytes moved aside, ${JSON.parse(last).type} recorded; verify ok=${after.ok}, ${after.entries} entries`);
  say();
  say(`Try it yourself: ${bold('node packages/audit-chain/dist/cli.js --help')}`);
} finally {
  await rm(dir, { recursive: true, force: true });
}
