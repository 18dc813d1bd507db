import { existsSync } from 'node:fs';
import { sep } from 'node:path';
import type { PathLock } from './contract.js';
import { RegistryError } from './errors.js';
import { toolNameProblem } from './name.js';
import { ScopeDir } from './store.js';
import type { ReadResult, ToolStore } from './toolStore.js';
import type { Scope } from './types.js';
import { startWatcher } from './watch.js';

function checkName(name: string): void {
  const problem = toolNameProblem(name);
  if (problem) throw new RegistryError('invalid_option', `${JSON.stringify(name)} is not a tool name: it ${problem}`);
}

/**
 * The file implementation of {@link ToolStore}: the tools of `scope` in the directory `root`, one
 * `<name>.json` per live tool, replaced and removed versions under `.versions/<name>/`, the
 * cross-process locks under `.locks/` (`options.lock`, else proper-lockfile: a lock whose holder
 * died is taken over after 10 s), every write a fsynced 0600 temp file published by link(2) or rename(2) and the
 * directory fsynced. Files under a built-in name in `builtins` are `bad`. Touches no file until a
 * write; `watch` uses one inotify watch for the directory (or the nearest existing one above it).
 */
export function fileToolStore(scope: Scope, root: string, builtins: Iterable<string> = [], options: { lock?: PathLock } = {}): ToolStore {
  const dir = new ScopeDir(scope, root, new Set(builtins), options.lock);
  return {
    scope,
    where: root,
    loadAll: (onTool, onFailure) => dir.loadAll(onTool, onFailure),
    async read(name): Promise<ReadResult> {
      const problem = toolNameProblem(name);
      if (problem === undefined) return dir.read(name);
      // A file dropped in by hand under a name outside the grammar: report it, never open it
      // (and never look outside the root for one that names a path).
      if (typeof name !== 'string' || name.includes('/') || name.includes('\\') || name.includes('\0')) return { status: 'missing' };
      const path = `${root}${sep}${name}.json`;
      if (!existsSync(path)) return { status: 'missing' };
      return { status: 'bad', failure: { path, reason: `file name ${JSON.stringify(`${name}.json`)} is not a tool name: it ${problem}` } };
    },
    async collisions(name) {
      checkName(name);
      return dir.collisions(name);
    },
    async put(name, decide) {
      checkName(name);
      return dir.put(name, decide);
    },
    async remove(name, check) {
      checkName(name);
      return dir.remove(name, check);
    },
    async versions(name) {
      return toolNameProblem(name) ? [] : dir.versions(name);
    },
    async watch(onChange, options = {}) {
      return startWatcher(
        [{ scope, root }],
        (pending) => {
          const names = pending.get(scope);
          if (names && names.size > 0) onChange([...names].sort());
        },
        options,
      );
    },
  };
}
