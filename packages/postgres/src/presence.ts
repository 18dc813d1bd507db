import { hostname } from 'node:os';
import type { Member, PresenceStore } from '@forge/queue';
import { looksAlive, PRESENCE_STALE_MS } from '@forge/queue';
import type pg from 'pg';
import type { Migration } from './migration.js';

/** The presence table (migration 50; versions 50–59 are the deployment's: presence, …). */
export const PRESENCE_MIGRATIONS: readonly Migration[] = [
  {
    version: 50,
    name: 'presence of front-ends and workers',
    sql: `CREATE TABLE forge_presence (
  name text COLLATE "C" PRIMARY KEY,
  kind text NOT NULL CHECK (kind IN ('front-end', 'worker')),
  host text NOT NULL,
  pid integer NOT NULL,
  started_at timestamptz NOT NULL,
  beat_at timestamptz NOT NULL,
  facts jsonb NOT NULL DEFAULT '{}'::jsonb
);`,
  },
];

const NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$/;

/**
 * Presence in PostgreSQL: one row per front-end or worker, its beat written with the server's
 * clock (`now()`), so hosts whose clocks disagree still agree on who is silent. A member is alive
 * while its last beat is recent; on this host, also while its pid is.
 */
export function postgresPresence(pool: pg.Pool): PresenceStore {
  return {
    async beat(m) {
      if (!NAME.test(m.name)) throw new TypeError(`presence: member name ${JSON.stringify(m.name)} is not 1 to 100 of A-Z a-z 0-9 _ -`);
      await pool.query(
        `INSERT INTO forge_presence (name, kind, host, pid, started_at, beat_at, facts)
         VALUES ($1, $2, $3, $4, to_timestamp($5 / 1000.0), now(), $6)
         ON CONFLICT (name) DO UPDATE SET kind = $2, host = $3, pid = $4, started_at = to_timestamp($5 / 1000.0), beat_at = now(), facts = $6`,
        [m.name, m.kind, m.host, m.pid, m.startedAt, JSON.stringify(m.facts ?? {})],
      );
    },
    async leave(name) {
      await pool.query('DELETE FROM forge_presence WHERE name = $1', [name]);
    },
    async list(o = {}) {
      const stale = o.staleMs ?? PRESENCE_STALE_MS;
      const r = await pool.query<{
        name: string;
        kind: Member['kind'];
        host: string;
        pid: number;
        started: string;
        beat: string;
        silent: string;
        facts: Member['facts'];
      }>(
        `SELECT name, kind, host, pid, (extract(epoch FROM started_at) * 1000)::bigint AS started,
                (extract(epoch FROM beat_at) * 1000)::bigint AS beat,
                (extract(epoch FROM now() - beat_at) * 1000)::bigint AS silent, facts
           FROM forge_presence ORDER BY kind, name`,
      );
      const here = hostname();
      return r.rows.map((row) => {
        const alive = looksAlive(row, Number(row.silent), stale, here);
        return {
          name: row.name,
          kind: row.kind,
          host: row.host,
          pid: row.pid,
          startedAt: Number(row.started),
          beatAt: Number(row.beat),
          ...(row.facts && Object.keys(row.facts).length > 0 ? { facts: row.facts } : {}),
          alive,
        };
      });
    },
  };
}
