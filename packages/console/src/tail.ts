import { type FSWatcher, watch } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { SECURITY_HEADERS } from './access.js';
import type { AuditIndex } from './audit-index.js';

/** Most entries one change of the log sends to a page (a burst beyond it: the page pages the rest). */
const MAX_BURST = 200;

/**
 * The audit page's live tail: server-sent events, one `entry` per line the log gains, whoever
 * appended it (this process or any other). Each page's stream has its own position: the entry it
 * said it has (`?after=<seq>`, the newest of the first page it loaded), else the log's end when it
 * connected; so an entry appended between a page's first load and its stream is still sent, and an
 * entry another route's read of the index took in first is too. The log's directory is watched; a
 * slow poll covers what a watch misses (a file system without notifications). Idle streams get a
 * comment every 15 s, so a proxy or the browser does not drop them.
 */
export class LogFollower {
  readonly #index: AuditIndex;
  /** Each stream and the last seq it was sent. */
  readonly #streams = new Map<ServerResponse, number>();
  readonly #watcher: FSWatcher | undefined;
  readonly #poll: NodeJS.Timeout;
  readonly #heartbeat: NodeJS.Timeout;
  #following: Promise<void> | undefined;
  #again = false;

  constructor(index: AuditIndex, dir: string) {
    this.#index = index;
    let watcher: FSWatcher | undefined;
    try {
      watcher = watch(dir, { persistent: false }, () => void this.#follow());
    } catch {
      watcher = undefined; // no directory yet, or no notifications here: the poll follows alone
    }
    this.#watcher = watcher;
    this.#poll = setInterval(() => void this.#follow(), 2000);
    this.#poll.unref();
    this.#heartbeat = setInterval(() => {
      for (const s of this.#streams.keys()) s.write(': alive\n\n');
    }, 15_000);
    this.#heartbeat.unref();
  }

  /** Answers `req` with the event stream until the page goes away: entries after `after` (else from now on). */
  add(req: IncomingMessage, res: ServerResponse, after?: number): void {
    res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'text/event-stream; charset=utf-8', connection: 'keep-alive' });
    res.write(': following the audit log\n\n');
    this.#streams.set(res, Math.min(after ?? this.#index.size, this.#index.size));
    req.on('close', () => this.#streams.delete(res));
    void this.#follow();
  }

  /** One pass at a time; a change during a pass makes one more. */
  #follow(): Promise<void> {
    if (this.#following) {
      this.#again = true;
      return this.#following;
    }
    this.#following = (async () => {
      try {
        do {
          this.#again = false;
          await this.#send();
        } while (this.#again);
      } finally {
        this.#following = undefined;
      }
    })();
    return this.#following;
  }

  async #send(): Promise<void> {
    if (this.#streams.size === 0) return;
    await this.#index.refresh().catch(() => []);
    const end = this.#index.size;
    for (const [s, last] of this.#streams) {
      // A log read again from its start (replaced, not appended to) may be shorter: follow its end.
      if (last >= end) {
        this.#streams.set(s, end);
        continue;
      }
      const seqs = [];
      for (let seq = Math.max(last, end - MAX_BURST) + 1; seq <= end; seq++) seqs.push({ seq });
      this.#streams.set(s, end);
      for (const view of await this.#index.views(seqs)) s.write(`event: entry\ndata: ${JSON.stringify(view)}\n\n`);
    }
  }

  close(): void {
    clearInterval(this.#poll);
    clearInterval(this.#heartbeat);
    this.#watcher?.close();
    for (const s of this.#streams.keys()) s.end();
    this.#streams.clear();
  }
}
