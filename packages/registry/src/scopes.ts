import { isAbsolute, join } from 'node:path';
import { RegistryError } from './errors.js';
import type { Scope } from './types.js';

/**
 * The directory of each scope that is in play. `scopeRoots` always fills in `user`; a registry
 * over some scopes only (a session's, say) lets a host that serves many sessions compose one
 * shared user-and-project registry with a small one per session.
 */
export interface ScopeRoots {
  user?: string;
  project?: string;
  session?: string;
  task?: string;
}

/** What `scopeRoots` computes the directories from. */
export interface ScopeRootsInput {
  /** `$FORGE_HOME`: the user scope is `<forgeHome>/tools`. */
  forgeHome: string;
  /** The project directory: the project scope is `<project>/.forge/tools`. */
  project?: string;
  /** Session id (needs `project`): `<project>/.forge/sessions/<session>/tools`. */
  session?: string;
  /** Task id (needs `session`): `<project>/.forge/sessions/<session>/tasks/<task>/tools`. */
  task?: string;
}

const MAX_ID = 128;

/** Why a session or task id cannot be a directory name, or `undefined`. */
export function scopeIdProblem(id: string): string | undefined {
  if (id.length === 0) return 'must not be empty';
  if (id.length > MAX_ID) return `must be at most ${MAX_ID} characters`;
  // Printable ASCII only; never a separator, and nothing that walks up.
  if (!/^[\x21-\x7e]+$/.test(id)) return 'may only hold printable ASCII characters without spaces';
  if (id.includes('/') || id.includes('\\')) return 'must not contain "/" or "\\"';
  if (id.includes('..')) return 'must not contain ".."';
  if (id === '.') return 'must not be "."';
  return undefined;
}

function checkId(what: 'session' | 'task', id: string): void {
  const problem = scopeIdProblem(id);
  if (problem) throw new RegistryError('invalid_option', `${what} id ${JSON.stringify(id)} ${problem}`);
}

function checkAbsolute(what: string, path: string): void {
  if (!isAbsolute(path)) throw new RegistryError('invalid_option', `${what} must be an absolute path (got ${JSON.stringify(path)})`);
}

/**
 * The scope directories of forge's on-disk layout. Pure: touches no file. Throws
 * `invalid_option` for a relative path, a session without a project, a task without a session,
 * or an id that could leave its directory (`/`, `..`, control characters).
 */
export function scopeRoots(input: ScopeRootsInput): ScopeRoots & { user: string } {
  checkAbsolute('forgeHome', input.forgeHome);
  const roots: ScopeRoots & { user: string } = { user: join(input.forgeHome, 'tools') };
  if (input.project === undefined) {
    if (input.session !== undefined || input.task !== undefined) {
      throw new RegistryError('invalid_option', 'a session or task scope needs a project: pass project as well');
    }
    return roots;
  }
  checkAbsolute('project', input.project);
  const forge = join(input.project, '.forge');
  roots.project = join(forge, 'tools');
  if (input.session === undefined) {
    if (input.task !== undefined) throw new RegistryError('invalid_option', 'a task scope needs a session: pass session as well');
    return roots;
  }
  checkId('session', input.session);
  const session = join(forge, 'sessions', input.session);
  roots.session = join(session, 'tools');
  if (input.task !== undefined) {
    checkId('task', input.task);
    roots.task = join(session, 'tasks', input.task, 'tools');
  }
  return roots;
}

/** The scopes configured in `roots`, most specific first. */
export function configuredScopes(roots: ScopeRoots): Scope[] {
  return (['task', 'session', 'project', 'user'] as const).filter((s) => roots[s] !== undefined);
}
