import * as registry from '@forge/registry';
import { type ReadResult, type Scope, type StoredTool, TOOL_STATES, toolNameProblem, wireKey } from '@forge/registry';
import { redactUrl } from './url.js';

type RecordCheck = (value: unknown, where: { name: string; scope: Scope; builtins: ReadonlySet<string>; path: string }) => ReadResult;

/**
 * The registry's own check of a record a store read (`checkStoredRecord`: the load path's shape
 * and stamp check, its own name, not a built-in) when @forge/registry exports it; until the
 * installed version does, {@link interimCheck}.
 */
const registryCheck = (registry as unknown as { checkStoredRecord?: RecordCheck }).checkStoredRecord;

const SCOPE_NAMES: ReadonlySet<string> = new Set(['task', 'session', 'project', 'user']);
const STATES: ReadonlySet<string> = new Set(TOOL_STATES);
const REQUIRED = [
  'name',
  'description',
  'input_schema',
  'impl',
  'runtime',
  'version',
  'digest',
  'created_at',
  'created_by',
  'scope',
  'state',
];

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * The fields and types every stored tool has, for as long as @forge/registry does not export its
 * full check (which also checks meta, examples and the date format).
 */
function interimShapeProblem(v: unknown): string | undefined {
  if (!isObject(v)) return 'not a valid tool spec: spec: must be object';
  for (const k of REQUIRED) if (!(k in v)) return `not a valid tool spec: spec: must have required property '${k}'`;
  const nameProblem = toolNameProblem(v.name);
  if (nameProblem) return `not a valid tool spec: name: ${nameProblem}`;
  for (const k of ['description', 'impl', 'runtime', 'created_at'])
    if (typeof v[k] !== 'string' || v[k] === '') return `not a valid tool spec: ${k}: must be a non-empty string`;
  if (!isObject(v.input_schema)) return 'not a valid tool spec: input_schema: must be object';
  if (typeof v.version !== 'number' || !Number.isInteger(v.version) || v.version < 1)
    return 'not a valid tool spec: version: must be an integer >= 1';
  if (typeof v.digest !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(v.digest))
    return 'not a valid tool spec: digest: must be sha256:<64 hex>';
  const by = v.created_by;
  if (!isObject(by) || typeof by.persona !== 'string' || typeof by.session !== 'string')
    return 'not a valid tool spec: created_by: must be an object with persona and session strings';
  if (typeof v.scope !== 'string' || !SCOPE_NAMES.has(v.scope))
    return 'not a valid tool spec: scope: must be task, session, project or user';
  if (typeof v.state !== 'string' || !STATES.has(v.state)) return `not a valid tool spec: state: must be one of ${TOOL_STATES.join(', ')}`;
  return undefined;
}

/** {@link RecordCheck} with {@link interimShapeProblem}: what the registry's check does, in this package. */
const interimCheck: RecordCheck = (value, where) => {
  const problem = interimShapeProblem(value);
  if (problem) return { status: 'bad', failure: { path: where.path, reason: problem } };
  const tool = value as StoredTool;
  if (tool.name !== where.name) {
    return {
      status: 'bad',
      failure: {
        path: where.path,
        reason: `stored under ${JSON.stringify(where.name)} but the spec is named ${JSON.stringify(tool.name)}`,
      },
    };
  }
  if (where.builtins.has(tool.name)) {
    return {
      status: 'bad',
      failure: { path: where.path, reason: `${JSON.stringify(tool.name)} is a built-in name; a stored tool cannot shadow it` },
    };
  }
  return { status: 'ok', tool: { ...tool, scope: where.scope } };
};

const checkRecord: RecordCheck = registryCheck ?? interimCheck;

/** One row of the tools table as read. */
export interface ToolRow {
  name: string;
  version: number;
  tool: string;
}

/**
 * Turns a row into a read result: `bad` (with the reason) for text that is not JSON, not a
 * stored tool, a tool of another name or version than its row, or a built-in name. The tool's
 * `scope` is set to the store's: the store is the truth. Never throws.
 */
export function parseRow(row: ToolRow, path: string, scope: Scope, builtins: ReadonlySet<string>): ReadResult {
  let value: unknown;
  try {
    value = JSON.parse(row.tool);
  } catch (err) {
    return { status: 'bad', failure: { path, reason: `not valid JSON: ${(err as Error).message}` } };
  }
  const r = checkRecord(value, { name: row.name, scope, builtins, path });
  if (r.status === 'ok' && r.tool.version !== row.version) {
    return { status: 'bad', failure: { path, reason: `the record of version ${row.version} holds version ${r.tool.version}` } };
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
