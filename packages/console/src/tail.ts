import { type FSWatcher, watch } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { SECURITY_HEADERS } from './access.js';
import type { AuditIndex } from './audit-index.js';

/** Most entries one change of the log sends to a page (a burst beyond it: the page pages the rest). */
const MAX_BURST = 200;

/**
 * The audit page's live tail: server-sent events, one `entry` per line the log gains, whoever
 * appended it (this process or any other). The log's directory is watched; a slow poll covers
 * what a watch misses (a file system without notifications). Idle streams get a comment every
 * 15 s, so a proxy or the browser does not drop them.
 */
export class LogFollower {
  readonly #index: AuditIndex;
  readonly #streams = new Set<ServerResponse>();
  readonly #watcher: FSWatcher | undefined;
  readonly #poll: NodeJS.Timeout;
  readonly #heartbeat: NodeJS.Timeout;
  /** The last entry sent: a refresh shared by a watch event and the poll gives its rows to both, sent once. */
  #sent = 0;

  constructor(index: AuditIndex, dir: string) {
    this.#index = index;
    this.#sent = index.size;
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
      for (const s of this.#streams) s.write(': alive\n\n');
    }, 15_000);
    this.#heartbeat.unref();
  }

  /** Answers `req` with the event stream until the page goes away. */
  add(req: IncomingMessage, res: ServerResponse): void {
    res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'text/event-stream; charset=utf-8', connection: 'keep-alive' });
    res.write(': following the audit log\n\n');
    this.#streams.add(res);
    req.on('close', () => this.#streams.delete(res));
  }

  async #follow(): Promise<void> {
    if (this.#streams.size === 0) return;
    const added = (await this.#index.refresh().catch(() => [])).filter((r) => r.seq > this.#sent);
    if (added.length === 0) return;
    this.#sent = (added[added.length - 1] as { seq: number }).seq;
    for (const view of await this.#index.views(added.slice(-MAX_BURST))) {
      const frame = `event: entry\ndata: ${JSON.stringify(view)}\n\n`;
      for (const s of this.#streams) s.write(frame);
    }
  }

  close(): void {
    clearInterval(this.#poll);
    clearInterval(this.#heartbeat);
    this.#watcher?.close();
    for (const s of this.#streams) s.end();
    this.#streams.clear();
  }
}
