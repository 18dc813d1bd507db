import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { GiveUp, waitFor } from '@forge/test-utils';
import { onTestFinished } from 'vitest';

/** The child writer (see the comment at the top of the file for its arguments and output). */
export const WRITER = new URL('./fixtures/writer.mjs', import.meta.url).pathname;

export interface WriterOptions {
  acks?: string;
  window?: number;
  rotateAt?: number;
  pad?: number;
  lock?: { staleMs?: number; timeoutMs?: number };
  maxBatchBytes?: number;
  hangDatasyncMs?: number;
  holdWrite?: string;
  go?: string;
  signingKey?: string;
  checkpointEvery?: number;
  rotateEvery?: number;
  treeOrigin?: string;
}

export interface Writer {
  child: ChildProcess;
  pid: number;
  id: string;
  acksPath: string;
  /** Resolves when the process has exited (and has been reaped). */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr(): string;
}

/**
 * Starts the child writer. The child is SIGKILLed when the current test finishes if it is still
 * running, so a failing test never leaves a writer behind.
 */
export function spawnWriter(logPath: string, count: number, id: string, options: WriterOptions = {}): Writer {
  const acksPath = options.acks ?? `${logPath}-${id}.acks`;
  const child = spawn(process.execPath, [WRITER, logPath, String(count), id, JSON.stringify({ ...options, acks: acksPath })], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (s: string) => {
    err += s;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal }));
  });
  onTestFinished(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  if (child.pid === undefined) throw new Error('could not start the writer process');
  return { child, pid: child.pid, id, acksPath, exited, stderr: () => err };
}

/** Waits for a clean exit (code 0), failing with the child's stderr otherwise. */
export async function expectCleanExit(w: Writer): Promise<void> {
  const { code, signal } = await w.exited;
  if (code !== 0) throw new Error(`writer ${w.id} exited with code ${code} signal ${signal}: ${w.stderr()}`);
}

export interface Ack {
  id: string;
  i: number;
  seq: number;
  hash: string;
}

/**
 * Reads an acks file: the acknowledged appends (a last record without its '\n' is ignored: the
 * writer was killed while recording it) and the '#' event lines.
 */
export async function readAcks(path: string): Promise<{ acks: Ack[]; events: string[] }> {
  const text = await readFile(path, 'utf8').catch((e: NodeJS.ErrnoException) => {
    if (e.code === 'ENOENT') return '';
    throw e;
  });
  const lines = text.split('\n');
  lines.pop();
  const acks: Ack[] = [];
  const events: string[] = [];
  for (const line of lines) {
    if (line.startsWith('#')) {
      events.push(line.slice(1));
      continue;
    }
    const [id, i, seq, hash] = line.split(':');
    acks.push({ id: id as string, i: Number(i), seq: Number(seq), hash: hash as string });
  }
  return { acks, events };
}

/**
 * Starts writers that all open the log, then waits until every one of them is ready and lets them
 * start appending at the same moment, so that they really do contend for the log.
 */
export async function startTogether(dir: string, start: (go: string) => Writer[]): Promise<Writer[]> {
  const go = join(dir, 'go');
  const writers = start(go);
  await waitFor('every writer to open the log', async () => {
    for (const w of writers) {
      if (w.child.exitCode !== null) throw new GiveUp(`writer ${w.id} exited early: ${w.stderr()}`);
      if (!(await readAcks(w.acksPath)).events.includes('ready')) return undefined;
    }
    return true;
  });
  await writeFile(go, '');
  return writers;
}

export interface ChainEntry {
  seq: number;
  ts: string;
  type: string;
  // biome-ignore lint/suspicious/noExplicitAny: test data of any shape
  data: any;
  prev: string;
  hash: string;
  file: string;
  line: Buffer;
}

/** Complete lines of a buffer (each with its '\n') and the bytes after the last '\n'. */
export function splitLines(buf: Buffer): { lines: Buffer[]; rest: Buffer } {
  const lines: Buffer[] = [];
  let start = 0;
  for (;;) {
    const nl = buf.indexOf(0x0a, start);
    if (nl < 0) break;
    lines.push(buf.subarray(start, nl + 1));
    start = nl + 1;
  }
  return { lines, rest: buf.subarray(start) };
}

/**
 * Reads every entry of the log (sealed segments in order, then the active one), checking on its
 * own, without the library, that each line's hash is SHA-256 of its body and that the entries form
 * one chain from genesis with seq 1, 2, 3, … A torn last line of the active segment is returned as
 * `torn`, not as an entry.
 */
export async function readChain(path: string): Promise<{ entries: ChainEntry[]; torn: Buffer; segments: number }> {
  const dir = dirname(path);
  const base = basename(path);
  const sealed = (await readdir(dir))
    .filter((n) => n.startsWith(`${base}.`) && /^\d{6,}$/.test(n.slice(base.length + 1)))
    .sort((a, b) => Number(a.slice(base.length + 1)) - Number(b.slice(base.length + 1)));
  const files = [...sealed, base];
  const entries: ChainEntry[] = [];
  let prev = '0'.repeat(64);
  let torn: Buffer = Buffer.alloc(0);
  for (const file of files) {
    const buf = await readFile(join(dir, file)).catch((e: NodeJS.ErrnoException) => {
      if (e.code === 'ENOENT' && file === base) return Buffer.alloc(0);
      throw e;
    });
    const { lines, rest } = splitLines(buf);
    if (rest.length > 0 && file !== base) throw new Error(`sealed segment ${file} ends without a line feed`);
    torn = rest;
    for (const line of lines) {
      const body = line.subarray(0, line.length - 76);
      const e = JSON.parse(line.toString('utf8'));
      const computed = createHash('sha256').update(body).digest('hex');
      const where = `${file} entry ${entries.length + 1}`;
      if (e.hash !== computed) throw new Error(`${where}: hash ${e.hash} is not SHA-256 of the body (${computed})`);
      if (e.seq !== entries.length + 1) throw new Error(`${where}: seq is ${e.seq}`);
      if (e.prev !== prev) throw new Error(`${where}: prev does not link to the entry before`);
      prev = e.hash;
      entries.push({ ...e, file, line });
    }
  }
  return { entries, torn, segments: files.length };
}

/**
 * Checks that every acknowledged append is in the log exactly once, with the acknowledged seq and
 * hash, as a `t.write` entry carrying the writer's id and index.
 */
export function checkAcks(entries: ChainEntry[], acks: Ack[]): string[] {
  const problems: string[] = [];
  const byKey = new Map<string, ChainEntry[]>();
  for (const e of entries) {
    if (e.type !== 't.write') continue;
    const key = `${e.data.writer}:${e.data.i}`;
    const list = byKey.get(key);
    if (list) list.push(e);
    else byKey.set(key, [e]);
  }
  const seen = new Set<string>();
  for (const a of acks) {
    const key = `${a.id}:${a.i}`;
    if (seen.has(key)) problems.push(`${key} acknowledged twice`);
    seen.add(key);
    const found = byKey.get(key) ?? [];
    if (found.length !== 1) {
      problems.push(`${key} (acknowledged as seq ${a.seq}) is in the log ${found.length} times`);
      continue;
    }
    const e = found[0] as ChainEntry;
    if (e.seq !== a.seq || e.hash !== a.hash) {
      problems.push(`${key} acknowledged as seq ${a.seq} ${a.hash.slice(0, 8)}, log has seq ${e.seq} ${e.hash.slice(0, 8)}`);
    }
  }
  return problems;
}
