import type * as Sandbox from '@forge/sandbox';

/** The @forge/sandbox module. */
export type SandboxModule = typeof Sandbox;

let loading: Promise<SandboxModule> | undefined;

/**
 * @forge/sandbox, loaded at its first use: a process that only lists, reads or manages tools
 * never loads it (nor the child_process, http, net and dns modules it loads), which is a good part
 * of a one-shot command's start.
 */
export function sandboxModule(): Promise<SandboxModule> {
  loading ??= import('@forge/sandbox');
  return loading;
}

/** Whether this process asked for @forge/sandbox (only then can a sandbox of it exist). */
export function sandboxAsked(): boolean {
  return loading !== undefined;
}
