import { storedToolProblem } from './spec.js';
import type { ReadResult } from './toolStore.js';
import type { Scope, StoredTool } from './types.js';

/** Where a record is and what it must be, for {@link checkStoredRecord}. */
export interface StoredRecordContext {
  /** The name it is stored under. */
  name: string;
  /** The store's scope: stamped on the tool (the store is the truth). */
  scope: Scope;
  /** Built-in names: a record under one is unusable. */
  builtins: ReadonlySet<string>;
  /** Where it is, for the failure (a locator without a password; see `StoreFailure`). */
  path: string;
}

/**
 * The check a `ToolStore` other than the file store gives a record it read (parsed JSON): shape
 * and stamps (the fast check of `load`; no schema compile, no digest), stored under its own name,
 * not a built-in. `ok` with `scope` set to the store's, or `bad` with the reason (and the name it
 * is stored under, so that the registry keeps it as damaged). The file store
 * does the same with file-specific wording.
 */
export function checkStoredRecord(value: unknown, where: StoredRecordContext): ReadResult {
  const problem = storedToolProblem(value);
  if (problem) return { status: 'bad', failure: { path: where.path, reason: problem, name: where.name } };
  const tool = value as StoredTool;
  if (tool.name !== where.name) {
    return {
      status: 'bad',
      failure: {
        path: where.path,
        reason: `stored under ${JSON.stringify(where.name)} but the spec is named ${JSON.stringify(tool.name)}`,
        name: where.name,
      },
    };
  }
  if (where.builtins.has(tool.name)) {
    return {
      status: 'bad',
      failure: {
        path: where.path,
        reason: `${JSON.stringify(tool.name)} is a built-in name; a stored tool cannot shadow it`,
        name: where.name,
      },
    };
  }
  return { status: 'ok', tool: { ...tool, scope: where.scope } };
}
