import { describePresenceStore } from '@forge/conformance/presence';
import { migrate, postgresPresence } from '../src/index.js';
import { poolOn, usePostgres } from './helpers.js';

const pg = usePostgres();

describePresenceStore('postgres (postgresPresence)', async () => {
  const url = await pg.server().database();
  const pool = poolOn(url);
  await migrate(pool);
  return {
    open: async () => postgresPresence(pool),
    child: { module: new URL('./presence-open.mjs', import.meta.url).pathname, export: 'openPresence', args: [url] },
    cleanup: async () => {},
  };
});
