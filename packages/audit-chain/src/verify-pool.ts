import { existsSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { SealedSegment } from './segments.js';
import { type ChunkResult, verifyChunk } from './verify-chunk.js';

/** Bytes read per chunk while verifying. */
export const CHUNK_BYTES = 1 << 20;

/** Logs at least this large are verified on two threads (when the machine has two cores). */
const PARALLEL_MIN_BYTES = 32 << 20;

/** A helper thread that verifies one chunk at a time (see verify-worker.ts). */
export interface Helper {
  idle: boolean;
  run(buf: Buffer, length: number): Promise<{ result: ChunkResult; buf: Buffer }>;
  close(): Promise<void>;
}

/**
 * Starts a helper thread for a large log. Verification is CPU-bound (a SHA-256 and a JSON scan
 * per line), so a second core nearly doubles throughput. The helper's heap is capped so that the
 * whole process stays small; without a built worker file (running from source) there is none.
 */
export async function startHelper(snap: { sealed: SealedSegment[]; activeSize: number }, marks: number[]): Promise<Helper | undefined> {
  let total = snap.activeSize;
  for (const seg of snap.sealed) total += (await stat(seg.path).catch(() => ({ size: 0 }))).size;
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
  const waiting = new Map<number, { resolve(v: { result: ChunkResult; buf: Buffer }): void; reject(e: unknown): void }>();
  let failure: unknown;
  worker.on('message', (m: { id: number; result: ChunkResult; buf: ArrayBuffer }) => {
    helper.idle = true;
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
    idle: true,
    run(buf, length) {
      if (failure) return Promise.reject(failure);
      helper.idle = false;
      const id = ids++;
      return new Promise((resolve, reject) => {
        waiting.set(id, { resolve, reject });
        worker.postMessage({ id, buf: buf.buffer, length }, [buf.buffer as ArrayBuffer]);
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

  /** A buffer of at least `min` bytes that owns its whole ArrayBuffer (so it can move threads). */
  take(min: number): Buffer {
    const b = this.free.pop();
    if (b && b.length >= min) return b;
    // Room for a carried partial line plus a whole chunk, so one buffer serves chunk after chunk.
    return Buffer.from(new ArrayBuffer(Math.max(min, 2 * CHUNK_BYTES)));
  }

  give(b: Buffer): void {
    if (this.free.length < 4) this.free.push(b);
  }

  /** Verifies `buf[0, length)` on the helper when it is idle, else here and now. */
  verify(buf: Buffer, length: number, marks: ReadonlySet<number>): Promise<ChunkResult> {
    if (this.helper?.idle) {
      return this.helper.run(buf, length).then(({ result, buf: back }) => {
        this.give(back);
        return result;
      });
    }
    const result = verifyChunk(buf.subarray(0, length), marks);
    this.give(buf);
    return Promise.resolve(result);
  }

  async close(): Promise<void> {
    await this.helper?.close();
  }
}
