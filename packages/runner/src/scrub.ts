import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { chmod, type FileHandle, lstat, open, readdir, readlink, rename, rm, symlink } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { redactionMark, redactText, type SecretList } from './redact.js';

/** How much of a run's artifacts directory is searched for secret values. */
export interface ScrubLimits {
  /** Bytes of regular files read in all (a file past the budget is removed, not kept unsearched). */
  maxBytes: number;
  /** Directory entries visited (entries past it are removed). */
  maxEntries: number;
}

/** What {@link scrubArtifacts} did: paths relative to the directory, secret names, never values. */
export interface ScrubReport {
  /** Files rewritten, with how many values of each secret were replaced in each. */
  files: { path: string; replaced: Record<string, number> }[];
  /** Entries whose name (or symlink target) held a secret value, by their new path. */
  renamed: string[];
  /** Entries removed because they could not be searched within the limits, and why. */
  removed: { path: string; reason: string }[];
  /** Bytes read. */
  scanned_bytes: number;
}

const CHUNK = 1 << 20;

/**
 * Removes every secret value from a run's artifacts directory after the run (the tool is gone):
 * each regular file holding a value is rewritten atomically (a new file beside it, renamed over
 * it) with the value replaced by its mark; names and symlink targets holding a value are renamed
 * or remade. Symlinks are never followed, and files are opened with `O_NOFOLLOW`. Searching is
 * streamed in chunks (a value across a chunk boundary is found) and bounded by `limits`; what
 * lies past the bounds is removed, so nothing unsearched is kept.
 */
export async function scrubArtifacts(dir: string, secrets: SecretList, limits: ScrubLimits): Promise<ScrubReport> {
  const report: ScrubReport = { files: [], renamed: [], removed: [], scanned_bytes: 0 };
  if (secrets.length === 0) return report;
  let entries = 0;
  const walk = async (d: string): Promise<void> => {
    let names: string[];
    try {
      names = (await readdir(d)).sort();
    } catch {
      return;
    }
    for (const name of names) {
      let p = join(d, name);
      if (++entries > limits.maxEntries) {
        await rm(p, { recursive: true, force: true });
        report.removed.push({ path: redactText(relative(dir, p), secrets), reason: `more than ${limits.maxEntries} entries` });
        continue;
      }
      const renamedTo = redactText(name, secrets);
      if (renamedTo !== name) {
        p = await renameFree(d, name, renamedTo);
        report.renamed.push(relative(dir, p));
      }
      const st = await lstat(p);
      // The tool may have taken its own permissions away; the tool is gone, so nothing races this.
      if (st.isDirectory()) {
        if ((st.mode & 0o700) !== 0o700) await chmod(p, (st.mode & 0o7777) | 0o700);
        await walk(p);
      } else if (st.isSymbolicLink()) {
        const target = await readlink(p);
        const clean = redactText(target, secrets);
        if (clean !== target) {
          const tmp = join(d, tempName());
          await symlink(clean, tmp);
          await rename(tmp, p);
          if (!report.renamed.includes(relative(dir, p))) report.renamed.push(relative(dir, p));
        }
      } else if (st.isFile()) {
        if (report.scanned_bytes + st.size > limits.maxBytes) {
          await rm(p, { force: true });
          report.removed.push({ path: relative(dir, p), reason: `past the ${limits.maxBytes} bytes searched for secret values` });
          continue;
        }
        report.scanned_bytes += st.size;
        if ((st.mode & 0o600) !== 0o600) await chmod(p, (st.mode & 0o7777) | 0o600);
        const found = await scrubFile(p, secrets, st.mode & 0o777);
        if (found) report.files.push({ path: relative(dir, p), replaced: found });
      }
    }
  };
  await walk(dir);
  return report;
}

/** Renames `from` in `d` to `want` (made a single safe name), or a numbered variant if taken. */
async function renameFree(d: string, from: string, want: string): Promise<string> {
  let base = want.replaceAll('/', '_');
  if (Buffer.byteLength(base) > 200) base = `redacted-${randomBytes(4).toString('hex')}`;
  for (let n = 0; ; n++) {
    const p = join(d, n === 0 ? base : `${base}-${n}`);
    try {
      await lstat(p);
    } catch {
      await rename(join(d, from), p);
      return p;
    }
  }
}

function tempName(): string {
  return `.forge-scrub-${process.pid}-${randomBytes(6).toString('hex')}`;
}

/** Counts per secret name when `file` holds a value (then rewritten), else undefined. */
async function scrubFile(file: string, secrets: SecretList, mode: number): Promise<Record<string, number> | undefined> {
  const fh = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW);
  let counts: Map<string, number>;
  try {
    const scan = new StreamRedactor(secrets);
    await pump(fh, (chunk, final) => void scan.push(chunk, final));
    counts = scan.counts;
    if (counts.size === 0) return undefined;
    const tmp = join(file, '..', tempName());
    const out = await open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode || 0o600);
    try {
      const rewrite = new StreamRedactor(secrets);
      await pump(fh, async (chunk, final) => {
        for (const piece of rewrite.push(chunk, final)) if (piece.length > 0) await out.write(piece);
      });
    } catch (err) {
      await out.close();
      await rm(tmp, { force: true });
      throw err;
    }
    await out.close();
    await rename(tmp, file);
  } finally {
    await fh.close();
  }
  return Object.fromEntries(counts);
}

/** Reads `fh` from its start in chunks; the last call has `final` set. */
async function pump(fh: FileHandle, each: (chunk: Buffer, final: boolean) => unknown): Promise<void> {
  let pos = 0;
  for (;;) {
    const buf = Buffer.allocUnsafe(CHUNK);
    const { bytesRead } = await fh.read(buf, 0, CHUNK, pos);
    pos += bytesRead;
    await each(buf.subarray(0, bytesRead), bytesRead === 0);
    if (bytesRead === 0) return;
  }
}

/**
 * Replaces secret values in a byte stream fed in chunks: the leftmost match first (the longest at
 * one position), and the last `longest - 1` bytes held back until the next chunk decides them.
 */
export class StreamRedactor {
  readonly counts = new Map<string, number>();
  readonly #needles: { name: string; bytes: Buffer; mark: Buffer }[];
  readonly #hold: number;
  #carry: Buffer = Buffer.alloc(0);

  constructor(secrets: SecretList) {
    this.#needles = secrets.map(([name, value]) => ({
      name,
      bytes: Buffer.from(value, 'utf8'),
      mark: Buffer.from(redactionMark(name), 'utf8'),
    }));
    this.#hold = Math.max(0, ...this.#needles.map((n) => n.bytes.length - 1));
  }

  /** The bytes now decided (redacted); with `final`, everything left. */
  push(chunk: Buffer, final: boolean): Buffer[] {
    const buf = this.#carry.length > 0 ? Buffer.concat([this.#carry, chunk]) : chunk;
    // A match starting before `limit` lies wholly in `buf`: past it, the next chunk may complete one.
    const limit = final ? buf.length : buf.length - this.#hold;
    const out: Buffer[] = [];
    const next = this.#needles.map((n) => buf.indexOf(n.bytes));
    let i = 0;
    for (;;) {
      let best = -1;
      for (let j = 0; j < next.length; j++) {
        if ((next[j] as number) >= 0 && (next[j] as number) < i) next[j] = buf.indexOf((this.#needles[j] as { bytes: Buffer }).bytes, i);
        const at = next[j] as number;
        if (at >= 0 && (best < 0 || at < (next[best] as number))) best = j;
      }
      const at = best < 0 ? -1 : (next[best] as number);
      if (at < 0 || at >= limit) break;
      const n = this.#needles[best] as { name: string; bytes: Buffer; mark: Buffer };
      out.push(buf.subarray(i, at), n.mark);
      this.counts.set(n.name, (this.counts.get(n.name) ?? 0) + 1);
      i = at + n.bytes.length;
    }
    const end = Math.max(i, limit);
    out.push(buf.subarray(i, end));
    this.#carry = Buffer.from(buf.subarray(end));
    return out;
  }
}
