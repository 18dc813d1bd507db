// The entry a child process of the registry tests opens its store through (bundled by
// registry-harness.ts: children run plain node, which cannot import TypeScript).
import type { Scope } from '@forge/registry';
import pg from 'pg';
import { postgresToolStore } from '../src/registry.js';

/** `postgresToolStore` over a pool of its own on `url`, with the scope id of `ids` for `scope`. */
export async function openStore(url: string, ids: Partial<Record<Scope, string>>, scope: Scope, builtins: string[]) {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => {});
  return postgresToolStore(pool, { scope, scopeId: ids[scope], builtins });
}
