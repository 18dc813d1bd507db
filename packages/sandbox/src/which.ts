import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

/** The first executable called `name` on `PATH` (or in `extra` directories), else undefined. */
export function which(name: string, extra: readonly string[] = []): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(delimiter).filter(Boolean), ...extra];
  for (const dir of dirs) {
    const p = join(dir, name);
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  return undefined;
}
