import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { EnvironmentError, envFromFlags, type Parsed } from './args.js';

/** Where forge lives for this command: home, project and the environment, flags applied. */
export interface Where {
  env: NodeJS.ProcessEnv;
  home: string;
  project: string;
}

/** Home (`--home`, `FORGE_HOME`, XDG, ~/.config/forge) and project (`--project`, else found from the cwd). */
export async function where(values: Parsed['values'], base: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): Promise<Where> {
  // The engine is loaded only by commands that need it: --help and usage errors stay instant.
  const { defaultForgeHome, findProject } = await import('@forge/runner');
  const env = envFromFlags(values, base);
  const project = typeof values.project === 'string' ? resolve(values.project) : findProject(cwd);
  if (typeof values.project === 'string' && !isDir(project)) {
    throw new EnvironmentError(`--project ${values.project}: no such directory`);
  }
  return { env, home: defaultForgeHome(env), project };
}

function isDir(p: string): boolean {
  return existsSync(p) && statSync(p).isDirectory();
}
