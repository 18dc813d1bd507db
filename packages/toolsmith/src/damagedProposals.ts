import { basename } from 'node:path';
import type { Refusal } from '@forge/runner';
import { isProposalId } from './proposals.js';
import type { ProposalStore } from './stores.js';
import type { Proposal } from './types.js';

/**
 * Proposal files of the file store that cannot be used, by id: a refusal of that id names the
 * file and what to do, instead of saying there is no such proposal.
 */
export class DamagedProposals {
  readonly #why = new Map<string, string>();
  readonly #warn: (message: string) => void;

  constructor(warn: (message: string) => void) {
    this.#warn = warn;
  }

  /** The file store's `onProblem`: warns, and remembers a proposal file by its id. */
  readonly onProblem = (file: string, reason: string): void => {
    this.#warn(`${file}: ${reason}; it is skipped (restore it from a copy, or move it away and propose the tool again)`);
    const id = basename(file, '.json');
    if (isProposalId(id)) this.#why.set(id, `${file}: ${reason}`);
  };

  /** The proposal `id` from `store`, or undefined; a damaged file for it is remembered for `refusal`. */
  async read(store: ProposalStore, id: string): Promise<Proposal | undefined> {
    this.#why.delete(id);
    return store.get(id);
  }

  /** The `unknown_proposal` refusal of `id`, naming its file when that is what could not be read. */
  refusal(id: string): Refusal {
    const why = this.#why.get(id);
    // A damaged file is not "no proposal": the operator is told which file and what to do.
    if (why)
      return {
        ok: false,
        kind: 'unknown_proposal',
        message: `proposal "${id}" cannot be read, so nothing was done: ${why}; restore the file from a copy, or move it away and propose the tool again`,
      };
    return { ok: false, kind: 'unknown_proposal', message: `no proposal "${id}" in this project; \`forge toolsmith list\` shows them` };
  }
}
