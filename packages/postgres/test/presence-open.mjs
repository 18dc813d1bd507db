// How a child process of the presence suite opens the database's presence store.
import pg from 'pg';
import { postgresPresence } from '../dist/index.js';

export function openPresence(url) {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => {});
  return postgresPresence(pool);
}
