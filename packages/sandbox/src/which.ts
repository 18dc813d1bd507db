import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';

/**
 * The first executable file called `name` on `PATH` (or in `extra` directories), else undefined.
 * Only a regular file (or a symlink to one) counts: a directory named `bash` is searchable, so
 * `access(X_OK)` alone accepts it, but nothing can run it.
 */
export function which(name: string, extra: readonly string[] = []): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(delimiter).filter(Boolean), ...extra];
  for (const dir of dirs) {
    const p = join(dir, name);
    try {
      if (!statSync(p).isFile()) continue;
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  return undefined;
}
