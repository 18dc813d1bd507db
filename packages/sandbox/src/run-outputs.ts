import type { ChildProcess } from 'node:child_process';
import type { Duplex } from 'node:stream';
import { childrenOf } from './children.js';
import { COPY_LIMITS, type CopiedOutput, copyOut } from './copyout.js';
import type { Mount } from './profile.js';

/** What became of one per-run output directory. */
export type RunOutput = ({ path: string; lost?: undefined } & CopiedOutput) | { path: string; lost: string };

const LOST = 'the sandbox ended before its holder said the tool was done (the tool may have killed it), so nothing was copied out';

/**
 * What the holder of a run said once its tool had exited (launcher.ts, `holdRun`): the tool's exit
 * status as its shell saw it (128 + N for signal N), and whether the sandbox's init and the holder
 * were then its only processes. When they were, the run is over: the host may answer it without
 * waiting for the sandbox's teardown, since nothing of the tool is left to write, and no process
 * can appear in the sandbox again (only its own processes could start one).
 */
export interface HolderDone {
  status: number;
  alone: boolean;
}

/**
 * The output directories ({@link Mount.perRun} `rw`) of a run behind a holder: copied out of the
 * sandbox, through /proc, once the holder says `done <status> <processes>` on its channel (the
 * tool has exited) or when the run is killed; the holder is then released, which ends the sandbox.
 */
export class OutputCopy {
  readonly #child: ChildProcess;
  readonly #outputs: readonly Mount[];
  readonly #bytes: number;
  #copied: RunOutput[] | undefined;
  #unmoved: Error | undefined;

  /** `bytes`: how much each directory may hold (`limits.outputDirBytes`). */
  constructor(child: ChildProcess, outputs: readonly Mount[], bytes: number) {
    this.#child = child;
    this.#outputs = outputs;
    this.#bytes = bytes;
  }

  /**
   * Copies the directories out when the holder says the tool is done, tells `onDone` what it
   * said, then releases it: at once, or once the promise `onDone` returns settles (the sandbox is
   * kept until then, see run-keep.ts).
   */
  listen(channel: Duplex | null | undefined, onDone?: (done: HolderDone) => PromiseLike<void> | undefined): void {
    if (!channel) return;
    let heard = '';
    channel.on('error', () => {});
    const onData = (chunk: Buffer) => {
      // Only the end is kept: the tool may write to this channel too (through /proc), and what it
      // writes must cost this process nothing.
      heard = (heard + chunk.toString('latin1')).slice(-64);
      const said = /(?:^|\n)done (\d{1,3}) (\d{1,9})\n/.exec(heard);
      if (!said) return;
      channel.off('data', onData);
      this.copy();
      const kept = onDone?.({ status: Number(said[1]), alone: said[2] === '2' });
      if (kept) void kept.then(() => channel.end('\n'));
      else channel.end('\n');
    };
    channel.on('data', onData);
  }

  /** Copies what the directories hold now, once; a no-op before the sandbox has a process to read through. */
  copy(): void {
    if (this.#copied) return;
    if (this.#outputs.length === 0) {
      this.#copied = [];
      return;
    }
    const pid = this.#child.pid ? sandboxPid(this.#child.pid) : undefined;
    if (!pid) return;
    this.#copied = this.#outputs.map((m) => {
      try {
        const got = copyOut(`/proc/${pid}/root${m.target ?? m.source}`, m.source, { ...COPY_LIMITS, bytes: this.#bytes });
        return got ? { path: m.source, ...got } : { path: m.source, lost: 'the sandbox was not set up yet' };
      } catch (err) {
        this.#unmoved ??= err as Error;
        return { path: m.source, lost: (err as Error).message };
      }
    });
  }

  /** The first error that kept a directory from being copied out, if one did. */
  get unmoved(): Error | undefined {
    return this.#unmoved;
  }

  /** Each directory's copy, or why there is none. */
  results(): RunOutput[] {
    return this.#copied ?? this.#outputs.map((m) => ({ path: m.source, lost: LOST }));
  }
}

/**
 * The process of a sandbox whose root is read through /proc: the command bwrap started (the
 * holder), else bwrap's init in the sandbox. Found from the launcher, which became bwrap.
 */
function sandboxPid(bwrap: number): number | undefined {
  const init = childrenOf(bwrap)[0];
  return init === undefined ? undefined : (childrenOf(init)[0] ?? init);
}
