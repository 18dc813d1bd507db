/**
 * pyenv's shims are shell scripts: which interpreter one runs depends on the moment, not on the
 * file, so asking it (`pyenv exec`, a dozen shells) is the only way to know, and it takes 0.2–2 s.
 * What it depends on is known, though: `PYENV_VERSION`, else the nearest `.python-version` from
 * `PYENV_DIR` (the working directory) up, else `$PYENV_ROOT/version`. A shim's identity is the
 * shim file and that choice; an answer remembered under it is reused only while the interpreter
 * it named is the same binary (runtimes.ts).
 */
import { readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** The identity of what a pyenv shim at `path` runs now; undefined for any other file (asked every time). */
export function pyenvShimId(path: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  let text: string;
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(path);
    if (!st.isFile() || st.size > 4096) return undefined;
    text = readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
  const root = /^export PYENV_ROOT="([^"\n]+)"$/m.exec(text)?.[1];
  if (!root || !/^exec "[^"\n]*\/libexec\/pyenv" exec "\$program" "\$@"$/m.test(text)) return undefined;
  const choice = env.PYENV_VERSION !== undefined ? `PYENV_VERSION=${env.PYENV_VERSION}` : versionFile(root, env.PYENV_DIR || process.cwd());
  return `pyenv:${path}:${st.ino}:${st.mtimeMs}:${choice}`;
}

/** The file that picks the version (its path and content), as pyenv looks for it. */
function versionFile(root: string, from: string): string {
  for (let d = from; ; d = dirname(d)) {
    const local = read(join(d, '.python-version'));
    if (local !== undefined) return `${join(d, '.python-version')}=${local}`;
    if (dirname(d) === d) break;
  }
  const global = join(root, 'version');
  return `${global}=${read(global) ?? '(none: system)'}`;
}

function read(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}
