// The task store's bounds per caller: how many run at once, how many are kept, and for how long.
import type { CallToolResult } from '@modelcontextprotocol/server';
import { describe, expect, it } from 'vitest';
import { TASK_TTL_MS, TaskStore } from '../src/tasks.js';

const result: CallToolResult = { content: [{ type: 'text', text: '{"ok":true}' }], isError: false };

/** A run that ends when the test says so (or when the task is cancelled). */
function gate() {
  let end!: () => void;
  const ended = new Promise<void>((r) => {
    end = r;
  });
  const run = async (signal: AbortSignal) => {
    await Promise.race([ended, new Promise((r) => signal.addEventListener('abort', r, { once: true }))]);
    return result;
  };
  return { run, end };
}

// Lets time pass: one macrotask turn, by which a run that ended has had the task store record it
// (its promise chain settles in microtasks, all run before a timer fires); there is no event to await.
const settle = () => new Promise((r) => setTimeout(r, 0));

describe('TaskStore bounds', () => {
  it('refuses a caller past its running tasks, names why, and takes one again once one ended; other callers are apart', async () => {
    const store = new TaskStore({ maxRunning: 2 });
    const a = gate();
    const b = gate();
    const first = store.create('alice', a.run);
    expect(first).toMatchObject({ status: 'working' });
    expect(store.create('alice', b.run)).toMatchObject({ status: 'working' });
    expect(store.create('alice', gate().run)).toEqual({ refused: expect.stringMatching(/already runs 2 tasks.*tasks\/cancel/) });
    expect(store.create('bob', gate().run)).toMatchObject({ status: 'working' });
    a.end();
    await settle();
    expect(store.get('alice', (first as { taskId: string }).taskId)).toMatchObject({ status: 'completed', result });
    expect(store.create('alice', gate().run)).toMatchObject({ status: 'working' });
  });

  it('counts ended tasks against the held cap until their TTL passed; cancel ends a task cancelled', async () => {
    let now = 1_000_000;
    const store = new TaskStore({ now: () => now, maxHeld: 2 });
    const g = gate();
    const t1 = store.create('alice', g.run) as { taskId: string };
    expect(store.cancel('alice', t1.taskId)).toBe(true);
    await settle();
    expect(store.get('alice', t1.taskId)).toMatchObject({ status: 'cancelled' });
    expect(store.cancel('bob', t1.taskId)).toBe(false);
    const t2 = store.create('alice', async () => result) as { taskId: string };
    await settle();
    expect(store.get('alice', t2.taskId)?.status).toBe('completed');
    expect(store.create('alice', async () => result)).toEqual({ refused: expect.stringMatching(/holds 2 tasks/) });
    now += TASK_TTL_MS + 1;
    expect(store.get('alice', t1.taskId)).toBeUndefined();
    expect(store.create('alice', async () => result)).toMatchObject({ status: 'working' });
  });
});
