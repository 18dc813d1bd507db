import { statSync } from 'node:fs';
import { join } from 'node:path';
import type { Forge } from '@forge/runner';
import { EnvironmentError } from './args.js';
import { callContext } from './context.js';
import { type ExportReport, exportCards, lockToolDir, prepareToolDir } from './tool-dir.js';
import type { Launcher } from './tool-files.js';
import { CallBook, openCallLog, readCalls } from './tool-log.js';
import type { Where } from './where.js';

/** How long a kept directory lets changes settle before it writes (a forge touches several files). */
export const SETTLE_MS = 100;

/** How many of each tool's latest calls its `log` file shows. */
export const LOG_ROWS = 20;

/** How often a kept directory looks at the policy in force and the gateway's files. */
const LOOK_MS = 400;

/** What identifies the files at `paths` now (absent ones too). */
function stamps(paths: readonly string[]): string {
  return paths
    .map((p) => {
      try {
        const st = statSync(p, { bigint: true });
        return `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
      } catch {
        return '-';
      }
    })
    .join(',');
}

/** What identifies the policy in force now (or why there is none). */
function policyDigest(f: Forge): string {
  const p = f.policy();
  return p.ok ? p.snapshot.digest : `refused: ${p.message}`;
}

/** forge's own state, where no export may write. */
export function stateOf(f: Forge): string[] {
  return [f.paths.home, f.paths.projectForge, f.paths.vault];
}

/** One export into `dir` (prepared and locked) of what the caller of `w` sees now. */
export async function exportOnce(f: Forge, w: Where, dir: string, cli: string, calls: { of: CallBook['of'] }): Promise<ExportReport> {
  const ctx = callContext(w.env);
  // Without a policy every call is refused and no card can be judged: the directory stays as it was.
  const pol = f.policy();
  if (!pol.ok) throw new EnvironmentError(`the policy cannot be read (${pol.message}); ${dir} is left as it was`);
  const cards = await f.describeTools(ctx);
  const launcher: Launcher = { node: process.execPath, cli, home: w.home, project: w.project };
  return exportCards(dir, cards, launcher, f.caller(ctx).persona, calls);
}

/** One line saying what an export did. */
export function exportSummary(r: ExportReport): string {
  return `${r.dir}: ${r.written.length} written, ${r.unchanged} unchanged, ${r.removed.length} removed${r.skipped.length > 0 ? `, ${r.skipped.length} left out` : ''}`;
}

/** A tool directory kept current by {@link keepToolDir}. */
export interface KeptToolDir {
  /** Its real path. */
  dir: string;
  /** Stops following changes, waits for a write in progress and lets the directory go. */
  stop(): Promise<void>;
}

/**
 * Exports what the caller of `w` sees into `target` (prepared and locked for as long as it is
 * kept), then again after each change: the engine's `toolsChanged` (its stores are watched, so
 * other processes' forges and removals count), a `policy.*` or `gateway.*` entry it writes, and
 * each call any process makes (the file log, verified once, then followed entry by entry; a
 * database's log followed as its commits come, from any host). `forge tools export --watch` and
 * `forge serve --tool-dir` keep one. Resolves after the first export.
 */
export async function keepToolDir(
  f: Forge,
  w: Where,
  target: string,
  cli: string,
  o: { report(r: ExportReport): void; note(message: string): void },
): Promise<KeptToolDir> {
  const dir = prepareToolDir(target, stateOf(f));
  const release = await lockToolDir(dir);
  const ac = new AbortController();
  let following: Promise<void> = Promise.resolve();
  let src: Awaited<ReturnType<typeof openCallLog>> | undefined;
  let offTools = () => {};
  let offAudit = () => {};
  let pending: NodeJS.Timeout | undefined;
  let running: Promise<unknown> = Promise.resolve();
  const letGo = async () => {
    offTools();
    offAudit();
    clearTimeout(pending);
    ac.abort();
    await running;
    await following;
    if (src?.kind === 'database') await src.close();
    await release();
  };
  try {
    const log = await openCallLog(w);
    src = log;
    const book = new CallBook(LOG_ROWS);
    const again = () => {
      running = running
        .then(async () => {
          if (ac.signal.aborted) return undefined;
          return exportOnce(f, w, dir, cli, book);
        })
        .then(
          (r) => {
            if (r && r.written.length + r.removed.length + r.skipped.length > 0) o.report(r);
          },
          (err) => o.note(`forge: export to ${dir} failed: ${(err as Error).message}; the next change tries again`),
        );
    };
    const soon = () => {
      clearTimeout(pending);
      pending = setTimeout(again, SETTLE_MS);
    };
    offTools = f.on('toolsChanged', soon);
    offAudit = f.on('audit', (e) => {
      if (e.type.startsWith('policy.') || e.type.startsWith('gateway.')) soon();
    });
    // The engine reads the policy files when asked, and the gateway its pins and configuration
    // (another process approves, unpins, edits): look every LOOK_MS, so a change shows within a
    // second (a look is a stat of each file while nothing changed).
    const look = () =>
      `${policyDigest(f)}|${stamps([join(f.paths.gatewayDir, 'pins.json'), f.paths.userGateway, f.paths.workspaceGateway])}`;
    let lookedAt = look();
    const looking = setInterval(() => {
      const now = look();
      if (now !== lookedAt) {
        lookedAt = now;
        soon();
      }
    }, LOOK_MS);
    looking.unref();
    const offPolicy = () => clearInterval(looking);
    const offOthers = offAudit;
    offAudit = () => {
      offPolicy();
      offOthers();
    };
    // The log is followed (the file, or the database's commits by any host): a call shows in its
    // tool's log as it is recorded.
    let live = false;
    await new Promise<void>((caughtUp) => {
      following = (async () => {
        const onLive = () => {
          live = true;
          caughtUp();
        };
        for await (const r of readCalls(log, { perTool: LOG_ROWS, follow: true, signal: ac.signal, onLive })) {
          book.add(r);
          if (live) soon();
        }
      })().catch((err) => {
        caughtUp();
        if (!ac.signal.aborted)
          o.note(`forge: following the audit log stopped: ${(err as Error).message}; the logs in ${dir} are no longer kept current`);
      });
    });
    o.report(await exportOnce(f, w, dir, cli, book));
  } catch (err) {
    await letGo();
    throw err;
  }
  return { dir, stop: letGo };
}
