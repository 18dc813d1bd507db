import { expect, it } from 'vitest';
import { poolFor } from '../src/pool.js';
import { usePostgres } from './helpers.js';

const pg = usePostgres();

it('a checked-out connection the server ends (a restart, a terminated backend) does not end the process: its next query fails', async () => {
  const { url, pool: admin } = await pg.database();
  const h = poolFor(url);
  try {
    const c = await h.pool.connect();
    const pid = (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
    // Held between two queries, as a transaction holds it: the server's goodbye arrives with no
    // query running, and pg emits it on the client itself (uncaught, it would end this process).
    const ended = new Promise((resolve) => c.once('end', resolve));
    await admin.query('SELECT pg_terminate_backend($1)', [pid]);
    await ended;
    await expect(c.query('SELECT 1')).rejects.toThrow();
    c.release(true);
    // The pool goes on with a new connection.
    expect((await h.pool.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
  } finally {
    await h.pool.end();
  }
});
