import { parentPort, workerData } from 'node:worker_threads';
import { chunkLeaves } from './leaves.js';
import { verifyChunk } from './verify-chunk.js';

// A helper thread: receives chunks of complete lines, verifies them or hashes them as leaves,
// returns plain-data results and hands the buffer back for reuse. The same pure code runs on the
// main thread for other chunks.
const marks = new Set<number>(workerData as number[]);
const port = parentPort;
type Message = { id: number; buf: ArrayBuffer; length: number; job: 'verify' | 'leaves'; from?: number; first?: number };
port?.on('message', (m: Message) => {
  if (m.job === 'leaves') {
    const result = chunkLeaves(Buffer.from(m.buf), m.from ?? 1, m.length, m.first);
    const moved = [m.buf, result.hashes.buffer, ...(result.tiles ? [result.tiles.hashes.buffer] : [])] as ArrayBuffer[];
    port.postMessage({ id: m.id, result, buf: m.buf }, moved);
    return;
  }
  const result = verifyChunk(Buffer.from(m.buf, 0, m.length), marks);
  port.postMessage({ id: m.id, result, buf: m.buf }, [m.buf]);
});
