import type { CommandSpec, Parsed } from './args.js';
import type { Output } from './output.js';
import type { Where } from './where.js';

/** What a command gets to work with. */
export interface Io {
  out: Output;
  /** Home, project and environment for this invocation (flags applied). */
  where(): Promise<Where>;
  /** All of stdin, read once. */
  stdin(): Promise<string>;
  /** The path of this CLI's own script (for commands that start `forge serve` as a child). */
  cliPath: string;
}

/** One command: its words (`tools call`), its usage and options, and a handler returning the exit code. */
export interface Command extends CommandSpec {
  words: string;
  run(p: Parsed, io: Io): Promise<number>;
}
