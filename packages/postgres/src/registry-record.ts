import { checkStoredRecord, type ReadResult, type Scope, toolNameProblem, wireKey } from '@forge/registry';
import { redactUrl } from './url.js';

/** One row of the tools table as read. */
export interface ToolRow {
  name: string;
  version: number;
  tool: string;
}

/**
 * Turns a row into a read result (the registry's `checkStoredRecord`, plus the row's version):
 * `bad` (with the reason, and the row's name: the registry keeps it as damaged) for text that is
 * not JSON, not a stored tool, a tool of another name or version than its row, or a built-in name. The tool's `scope` is set to the store's: the store
 * is the truth. Never throws.
 */
export function parseRow(row: ToolRow, path: string, scope: Scope, builtins: ReadonlySet<string>): ReadResult {
  let value: unknown;
  try {
    value = JSON.parse(row.tool);
  } catch (err) {
    return { status: 'bad', failure: { path, reason: `not valid JSON: ${(err as Error).message}`, name: row.name } };
  }
  const r = checkStoredRecord(value, { name: row.name, scope, builtins, path });
  if (r.status === 'ok' && r.tool.version !== row.version) {
    return {
      status: 'bad',
      failure: { path, reason: `the record of version ${row.version} holds version ${r.tool.version}`, name: row.name },
    };
  }
  return r;
}

/** True when the stored name `other` is a tool name whose wire key is `key` (see `wireKey`). */
export function sameWire(other: string, key: string): boolean {
  return toolNameProblem(other) === undefined && wireKey(other) === key;
}

/** What a pool connects to, as a URL without any password (for `where` and messages). */
export function poolLocator(options: {
  connectionString?: string | undefined;
  host?: string | undefined;
  port?: number | undefined;
  database?: string | undefined;
  user?: string | undefined;
}): string {
  if (options.connectionString) return redactUrl(options.connectionString);
  const user = options.user ?? process.env.PGUSER;
  const host = options.host ?? process.env.PGHOST ?? 'localhost';
  const port = options.port ?? process.env.PGPORT;
  const db = options.database ?? process.env.PGDATABASE ?? '';
  const socket = host.startsWith('/');
  return `postgres://${user ? `${encodeURIComponent(user)}@` : ''}${socket ? '' : host}${!socket && port ? `:${port}` : ''}/${encodeURIComponent(db)}${socket ? `?host=${encodeURIComponent(host)}` : ''}`;
}
