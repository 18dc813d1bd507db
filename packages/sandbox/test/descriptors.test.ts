/**
 * A process short of file descriptors (a burst of calls over HTTP holds a socket each, besides
 * the runs' own pipes): a run the system will not start is refused, named and marked transient
 * (the runner then waits for another run's end), nothing is left behind, and the process lives
 * on — including when the refusal comes while building a sandbox ahead, off any caller's path.
 */
import { describe, expect, it } from 'vitest';
import { requireSandbox, runInChild, tempDir } from './helpers.js';

/** The child's open-files limit: small, so that it runs short quickly. */
const LIMIT = 128;
/**
 * Runs the child under that limit with no descriptor past 2 but `keep` (a test runner may leak
 * its own, at any number: one above the limit would make every launch EINVAL, the second case).
 */
const limited = (keep = 0) => [
  'bash',
  '-c',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell parameter expansion
  'k=$1; shift; for p in /proc/$$/fd/*; do n=${p##*/}; if [ "$n" -gt 2 ] && [ "$n" != "$k" ]; then eval "exec $n<&-"; fi; done; exec "$@"',
  'limited',
  String(keep),
  'prlimit',
  `--nofile=${LIMIT}:${LIMIT}`,
  '--',
];

describe('short of file descriptors', () => {
  it('a run is refused sandbox_unavailable, transient, naming EMFILE; once descriptors are back, runs run', async () => {
    await requireSandbox();
    const stageDir = tempDir();
    const { code, out, err } = await runInChild(
      `
      const { openSync, closeSync, readdirSync } = await import('node:fs');
      const echo = (s) => ({ command: ['/bin/echo', s] });
      const opts = { prebuild: { stageDir: ${JSON.stringify(stageDir)} } };
      const first = await module.runSandboxed(echo('first'), opts);
      const held = [];
      for (;;) {
        try { held.push(openSync('/dev/null', 'r')); } catch (e) { if (e.code !== 'EMFILE') throw e; break; }
      }
      const refused = await module.runSandboxed(echo('short'), opts).then(
        (r) => ({ ran: r.reason }),
        (e) => ({ code: e.code, transient: e.transient, message: e.message }),
      );
      for (const fd of held) closeSync(fd);
      const again = await module.runSandboxed(echo('again'), opts);
      console.log(JSON.stringify({ first: first.stdout.toString(), held: held.length, refused, again: again.stdout.toString() }));
      `,
      { wrap: limited() },
    );
    expect(code, err).toBe(0);
    const seen = JSON.parse(out) as { first: string; held: number; refused: Record<string, unknown>; again: string };
    expect(seen.first).toBe('first\n');
    expect(seen.held).toBeGreaterThan(0);
    expect(seen.refused).toMatchObject({ code: 'sandbox_unavailable', transient: true, message: expect.stringMatching(/EMFILE/) });
    expect(seen.again).toBe('again\n');
  });

  it('an inherited descriptor above the limit: runs are refused for good (EINVAL), building ahead fails quietly, the process lives on', async () => {
    await requireSandbox();
    const stageDir = tempDir();
    // Descriptor LIMIT + 20 open in the child from its start (inherited): each launcher would
    // have to cover it, and the system refuses at once (Node throws, where EMFILE is emitted).
    const extraStdio: ('ignore' | 'pipe')[] = Array.from({ length: LIMIT + 20 - 2 }, () => 'ignore');
    extraStdio[LIMIT + 20 - 3] = 'pipe';
    const { code, out, err } = await runInChild(
      `
      const opts = { prebuild: { stageDir: ${JSON.stringify(stageDir)} } };
      const tries = [];
      for (let i = 0; i < 3; i++) {
        tries.push(await module.runSandboxed({ command: ['/bin/true'] }, opts).then(
          (r) => ({ ran: r.reason }),
          (e) => ({ code: e.code, transient: e.transient, message: e.message }),
        ));
        // Building ahead is scheduled with setImmediate once a run asked: let it run first.
        await new Promise((r) => setImmediate(r));
        await new Promise((r) => setImmediate(r));
      }
      console.log(JSON.stringify({ tries, stats: module.prebuiltStats() }));
      `,
      { wrap: limited(LIMIT + 20), extraStdio },
    );
    expect(code, err).toBe(0);
    const seen = JSON.parse(out) as { tries: Record<string, unknown>[]; stats: { ready: number } };
    for (const t of seen.tries) {
      expect(t).toMatchObject({
        code: 'sandbox_unavailable',
        transient: false,
        message: expect.stringMatching(
          /EINVAL: this process holds a file descriptor numbered at or above its open-files limit.*fix: start forge without that descriptor/,
        ),
      });
    }
    expect(seen.stats.ready).toBe(0);
  });
});
