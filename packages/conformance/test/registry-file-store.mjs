// How a child process of the tool store suite opens the file store of registry-file.test.ts:
// scope `s` of the storage `dir` is the directory `<dir>/<s>`.
import { join } from 'node:path';
import { fileToolStore } from '@forge/registry';

/** The file store of `scope` under `dir`, with `builtins` refused. */
export function openFileToolStore(dir, scope, builtins) {
  return fileToolStore(scope, join(dir, scope), builtins);
}
