/**
 * Sandboxes kept a little after their run was answered ({@link RunOptions.teardownAfter}).
 *
 * A run behind a holder is answered as soon as its tool is done and nothing of it is left; the
 * holder is then told to exit, and the kernel tears the sandbox's namespaces down (a few
 * milliseconds of this host's CPUs). A caller that runs several sandboxes in a row for one answer
 * (a call's pre hooks, its tool, its post hooks) would have each teardown beside the next run; kept
 * until that answer is given, the teardowns come after it. What a kept sandbox holds meanwhile: its
 * three processes, waiting (bwrap, the namespace's init, the holder blocked on its channel), its
 * cgroup, and one descriptor here (the channel: its other pipes are closed once it is kept).
 */

/** The most sandboxes kept at once: past it, a run's sandbox goes at once, as without the option. */
export const MAX_KEPT = 4;
/** The longest a sandbox is kept, whatever it waits for. */
export const KEPT_MS = 5_000;

/** Each kept sandbox's release. */
const kept = new Set<() => void>();

/**
 * Keeps a sandbox until `after` settles (at most {@link KEPT_MS}, or until {@link letKeptGo}):
 * resolves when it may go. Undefined (go now) without `after`, or when {@link MAX_KEPT} are kept.
 */
export function keepUntil(after: PromiseLike<unknown> | undefined): Promise<void> | undefined {
  if (after === undefined || kept.size >= MAX_KEPT) return undefined;
  return new Promise<void>((resolve) => {
    const go = () => {
      if (!kept.delete(go)) return;
      clearTimeout(timer);
      resolve();
    };
    // A kept sandbox never holds this process up: it dies with it (bwrap's --die-with-parent).
    const timer = setTimeout(go, KEPT_MS);
    timer.unref();
    kept.add(go);
    Promise.resolve(after).then(go, go);
  });
}

/** Lets every kept sandbox go now. */
export function letKeptGo(): void {
  for (const go of [...kept]) go();
}

/** How many sandboxes are kept now (for tests and diagnostics). */
export function keptSandboxes(): number {
  return kept.size;
}
