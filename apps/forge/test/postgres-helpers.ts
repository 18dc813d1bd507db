import { type PostgresServer, startPostgres } from '@forge/conformance/postgres';
import { scaled } from '@forge/test-utils';
import { afterAll, beforeAll } from 'vitest';
import { requireCliAndSandbox } from './helpers.js';

/**
 * A real PostgreSQL for the calling file's tests (run as an unprivileged user; it refuses root):
 * started before them with the CLI and sandbox checked, stopped after. The answer stands for the
 * server once it has started; used before, it throws.
 */
export function usePostgres(): PostgresServer {
  let server: PostgresServer | undefined;
  beforeAll(async () => {
    await requireCliAndSandbox();
    server = await startPostgres();
  }, scaled(120_000));
  afterAll(async () => {
    await server?.stop();
  }, scaled(120_000));
  return new Proxy({} as PostgresServer, {
    get(_, key) {
      if (!server) throw new Error('PostgreSQL has not started for this file (see the failure of its beforeAll)');
      const v: unknown = Reflect.get(server, key);
      return typeof v === 'function' ? v.bind(server) : v;
    },
  });
}
