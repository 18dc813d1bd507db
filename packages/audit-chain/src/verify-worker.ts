import { parentPort, workerData } from 'node:worker_threads';
import { verifyChunk } from './verify-chunk.js';

// A verification helper thread: receives chunks of complete lines, returns plain-data results and
// hands the buffer back for reuse. The same pure code runs on the main thread for other chunks.
const marks = new Set<number>(workerData as number[]);
const port = parentPort;
port?.on('message', (m: { id: number; buf: ArrayBuffer; length: number }) => {
  const result = verifyChunk(Buffer.from(m.buf, 0, m.length), marks);
  port.postMessage({ id: m.id, result, buf: m.buf }, [m.buf]);
});
