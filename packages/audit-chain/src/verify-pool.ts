import { existsSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { type ChunkLeaves, chunkLeaves } from './leaves.js';
import type { SealedSegment } from './segments.js';
import { type ChunkResult, verifyChunk } from './verify-chunk.js';

/** Bytes read per chunk while verifying. */
export const CHUNK_BYTES = 1 << 20;

/** Logs at least this large are verified on two threads (when the machine has two cores). */
const PARALLEL_MIN_BYTES = 32 << 20;

/** Leaf chunks kept queued on the helper (measured: fewer leaves it idle while this thread reads). */
const HELPER_QUEUE = 4;

/** What a helper does with a chunk: verify its lines, or hash them as leaves from a given byte on. */
export type HelperJob = 'verify' | 'leaves';

/** A helper thread that works on one chunk at a time (see verify-worker.ts). */
export interface Helper {
  /** Chunks handed to it and not yet back. */
  pending: number;
  run<R>(buf: Buffer, length: number, job: HelperJob, at?: { from: number; first: number }): Promise<{ result: R; buf: Buffer }>;
  close(): Promise<void>;
}

/** The bytes a walk over this snapshot reads. */
export async function snapshotBytes(snap: { sealed: SealedSegment[]; activeSize: number }): Promise<number> {
  let total = snap.activeSize;
  for (const seg of snap.sealed) total += (await stat(seg.path).catch(() => ({ size: 0 }))).size;
  return total;
}

/**
 * Starts a helper thread for a large log (`total` bytes to read). Verification and leaf hashing
 * are CPU-bound (a SHA-256 per line, and for verification a JSON scan), so a second core nearly
 * doubles throughput. The helper's heap is capped so that the
 * whole process stays small; without a built worker file (running from source) there is none.
 */
export async function startHelper(total: number, marks: number[]): Promise<Helper | undefined> {
  if (total < PARALLEL_MIN_BYTES) return undefined;
  const file = new URL('./verify-worker.js', import.meta.url);
  if (!existsSync(file)) return undefined;
  // Loaded here: a process that verifies no large log never loads worker_threads.
  const { Worker } = await import('node:worker_threads');
  const worker = new Worker(file, {
    workerData: marks,
    resourceLimits: { maxYoungGenerationSizeMb: 4, maxOldGenerationSizeMb: 256 },
  });
  worker.unref();
  // biome-ignore lint/suspicious/noExplicitAny: each waiter knows its own job's result type
  const waiting = new Map<number, { resolve(v: { result: any; buf: Buffer }): void; reject(e: unknown): void }>();
  let failure: unknown;
  worker.on('message', (m: { id: number; result: unknown; buf: ArrayBuffer }) => {
    helper.pending--;
    waiting.get(m.id)?.resolve({ result: m.result, buf: Buffer.from(m.buf) });
    waiting.delete(m.id);
  });
  worker.on('error', (err) => {
    failure = err;
    for (const p of waiting.values()) p.reject(err);
    waiting.clear();
  });
  let ids = 0;
  const helper: Helper = {
    pending: 0,
    run(buf, length, job, at) {
      if (failure) return Promise.reject(failure);
      helper.pending++;
      const id = ids++;
      return new Promise((resolve, reject) => {
        waiting.set(id, { resolve, reject });
        worker.postMessage({ id, buf: buf.buffer, length, job, ...at }, [buf.buffer as ArrayBuffer]);
      });
    },
    async close() {
      await worker.terminate();
    },
  };
  return helper;
}

/** Chunk buffers, reused, and the choice of thread for each chunk. */
export class ChunkPool {
  private readonly free: Buffer[] = [];
  constructor(private readonly helper: Helper | undefined) {}

  /** How many verified chunks may wait to be applied while the next one is read. */
  get depth(): number {
    return this.helper ? 2 : 0;
  }

  /**
   * How many chunks of leaf hashes may wait to be handed on, in order: enough that this thread
   * never waits for the oldest while the helper works through its queue (see leaves()).
   */
  get leafWindow(): number {
    return this.helper ? 4 * HELPER_QUEUE : 0;
  }

  /**
   * A buffer of at least `min` bytes that owns its whole ArrayBuffer (so it can move threads); a
   * new one is `size` bytes (default: room for a carried partial line plus a whole chunk, so one
   * buffer serves chunk after chunk).
   */
  take(min: number, size = Math.max(min, 2 * CHUNK_BYTES)): Buffer {
    const b = this.free.pop();
    if (b && b.length >= min) return b;
    return Buffer.from(new ArrayBuffer(Math.max(min, size)));
  }

  /** Keeps `b` for a later take(): as many as a walk has in flight at once (reads ahead, chunks on threads). */
  give(b: Buffer): void {
    if (this.free.length < 12) this.free.push(b);
  }

  /** Verifies `buf[0, length)` on the helper when it is idle, else here and now. */
  verify(buf: Buffer, length: number, marks: ReadonlySet<number>): Promise<ChunkResult> {
    if (this.helper?.pending === 0) {
      return this.helper.run<ChunkResult>(buf, length, 'verify').then(({ result, buf: back }) => {
        this.give(back);
        return result;
      });
    }
    const result = verifyChunk(buf.subarray(0, length), marks);
    this.give(buf);
    return Promise.resolve(result);
  }

  /**
   * The leaf hashes of the lines in `buf[from, end)`, the first being entry `first`, and the
   * hashes of the full tiles among them (see chunkLeaves): on the helper while fewer than
   * HELPER_QUEUE wait there, else here and now. The helper so gets the larger share: this
   * thread also reads the file, counts the lines and hands the hashes on.
   */
  leaves(buf: Buffer, from: number, end: number, first: number): Promise<ChunkLeaves> {
    if (this.helper && this.helper.pending < HELPER_QUEUE) {
      return this.helper.run<ChunkLeaves>(buf, end, 'leaves', { from, first }).then(({ result, buf: back }) => {
        this.give(back);
        // Structured cloning hands the hashes back as plain Uint8Arrays over the moved memory.
        const { count, hashes, tiles } = result;
        return { count, hashes: asBuffer(hashes), ...(tiles ? { tiles: { start: tiles.start, hashes: asBuffer(tiles.hashes) } } : {}) };
      });
    }
    const result = chunkLeaves(buf, from, end, first);
    this.give(buf);
    return Promise.resolve(result);
  }

  async close(): Promise<void> {
    await this.helper?.close();
  }
}

function asBuffer(b: Uint8Array): Buffer {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength);
}
