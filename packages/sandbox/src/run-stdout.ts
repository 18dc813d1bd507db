import { type FileHandle, open } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import type { Limits } from './profile.js';

const SPILL_BACKLOG = 8 << 20;

/**
 * A run's stdout as it arrives: the first `outputBytes` kept; once past them, everything (from the
 * first byte) written to `file` when one is given; `onHardCap` called past `outputHardBytes`. It
 * keeps draining past the cap, so a tool that prints forever cannot block on its stdout.
 */
export class StdoutKeeper {
  readonly #kept: Buffer[] = [];
  #keptBytes = 0;
  #total = 0;
  #spill: Promise<FileHandle> | undefined;
  #writes: Promise<void> = Promise.resolve();
  #pending = 0;
  #sealed = false;
  readonly #file: string | undefined;

  constructor(
    stdout: Readable | null,
    limits: Pick<Limits, 'outputBytes' | 'outputHardBytes'>,
    file: string | undefined,
    onHardCap: () => void,
  ) {
    this.#file = file;
    this.take = (chunk: Buffer) => {
      if (this.#sealed) return;
      this.#total += chunk.length;
      if (stdout && file && this.#total > limits.outputBytes) this.#spillChunk(stdout, file, chunk);
      if (this.#keptBytes < limits.outputBytes) {
        const take = chunk.subarray(0, limits.outputBytes - this.#keptBytes);
        this.#kept.push(take);
        this.#keptBytes += take.length;
      }
      if (this.#total > limits.outputHardBytes) onHardCap();
    };
    stdout?.on('data', this.take);
  }

  /** Takes a chunk of stdout: what the stream delivers, and what is read straight from its descriptor at the run's end (run.ts). */
  readonly take: (chunk: Buffer) => void;

  #spillChunk(stdout: Readable, file: string, chunk: Buffer): void {
    // The first time: everything so far (all of it was kept); afterwards: each chunk.
    const data = this.#spill ? chunk : Buffer.concat([...this.#kept, chunk]);
    this.#spill ??= open(file, 'wx', 0o600);
    const handle = this.#spill;
    this.#pending += data.length;
    if (this.#pending > SPILL_BACKLOG) stdout.pause(); // let the disk catch up before reading more
    this.#writes = this.#writes.then(async () => {
      await (await handle).write(data);
      this.#pending -= data.length;
      if (this.#pending <= SPILL_BACKLOG) stdout.resume();
    });
  }

  /** Takes nothing more: the run has been answered (a straggler's bytes after that are not its output). */
  seal(): void {
    this.#sealed = true;
  }

  /** What was kept: at most `outputBytes`. */
  kept(): Buffer {
    return Buffer.concat(this.#kept);
  }

  /** Every byte the tool wrote to stdout. */
  get bytes(): number {
    return this.#total;
  }

  /** True when {@link kept} holds only the first part. */
  get truncated(): boolean {
    return this.#total > this.#keptBytes;
  }

  /** Closes the spill file whatever became of its writes: for a run that is refused. */
  async abandon(): Promise<void> {
    await this.#writes.catch(() => {});
    if (this.#spill) await (await this.#spill).close();
  }

  /** Waits for the spill's writes (rejecting with their error) and closes it: the file's path, when there is one. */
  async finish(): Promise<string | undefined> {
    if (!this.#spill) return undefined;
    await this.#writes;
    const h = await this.#spill;
    await h.close();
    return this.#file;
  }
}
