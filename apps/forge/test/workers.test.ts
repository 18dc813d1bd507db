import { beforeAll, describe, expect, it } from 'vitest';
import { connect, exampleSpec, requireCliAndSandbox, runCli, scratch, until } from './helpers.js';
import { auditEntries } from './toolsmith-helpers.js';

/**
 * `forge serve --workers N` on one host: forged tools' calls go through the project's file job
 * queue to N `forge worker` children, which run and record them; a worker killed -9 is replaced
 * and the server goes on; the workers stop with the server.
 */

beforeAll(requireCliAndSandbox);

const fib = () => exampleSpec('fib');

/** Worker pids the server's stderr names, in order of their start. */
const workerPids = (stderr: string): number[] => [...stderr.matchAll(/: worker on file queue .*, pid (\d+)\)/g)].map((m) => Number(m[1]));

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('forge serve --workers N', () => {
  it('runs calls on its workers, replaces a worker killed -9, and stops them with itself', async () => {
    const s = scratch('forge-workers-');
    const c = await connect(s, { args: ['--workers', '2'] });
    await until(
      () => workerPids(c.stderr()).length === 2,
      20_000,
      () => c.stderr(),
    );
    const forged = await c.call('forge_tool', fib());
    expect(forged.env.ok, JSON.stringify(forged.env)).toBe(true);
    const first = await c.call('fib', { n: 20 });
    expect(first.env, JSON.stringify(first.env) + c.stderr()).toMatchObject({ ok: true, data: { n: 20, fib: '6765' } });
    // Run and recorded by a worker: its entry carries the job's call id, and the worker logged it.
    const called = auditEntries(s).filter((e) => e.type === 'forge.called');
    expect(called).toHaveLength(1);
    const callId = called[0]?.data.call_id as string;
    expect(callId).toMatch(/^c/);
    await until(
      () => c.stderr().includes(`forge worker: ${callId} fib ok`),
      5_000,
      () => c.stderr(),
    );

    // forge status sees the server and its two workers, the queue and the log's head.
    const st = await runCli(['status', '--json'], { cwd: s.project, env: s.env });
    expect(st.code, st.stderr).toBe(0);
    const report = JSON.parse(st.stdout) as {
      members: { kind: string; alive: boolean; pid: number }[];
      queue: { done: number; pending: number };
      audit: { seq: number; hash: string };
    };
    expect(report.members.filter((m) => m.alive).map((m) => m.kind)).toEqual(['front-end', 'worker', 'worker']);
    expect(report.queue).toMatchObject({ done: 1, pending: 0 });
    const last = auditEntries(s).at(-1) as { seq: number; hash?: string };
    expect(report.audit).toMatchObject({ seq: last.seq, hash: last.hash });
    // Each member's sandboxes built ahead are among its facts, read again at every beat: the
    // worker that ran fib keeps a warm Python waiting for the next call.
    let facts = '';
    await until(
      async () => {
        const now = JSON.parse((await runCli(['status', '--json'], { cwd: s.project, env: s.env })).stdout) as {
          members: { kind: string; facts?: Record<string, unknown> }[];
        };
        facts = JSON.stringify(now.members.map((m) => m.facts));
        return now.members.some((m) => m.kind === 'worker' && /^python3\S* 1\b.* MiB of \d+ MiB$/.test(String(m.facts?.warm)));
      },
      30_000,
      () => `a worker's facts to show its warm Python (facts: ${facts})`,
      500,
    );

    const [a, b] = workerPids(c.stderr());
    process.kill(a as number, 'SIGKILL');
    await until(
      () => workerPids(c.stderr()).length === 3,
      20_000,
      () => c.stderr(),
    );
    expect(c.stderr()).toMatch(new RegExp(`worker \\d \\(pid ${a}\\) ended \\(SIGKILL\\); starting another`));
    const second = await c.call('fib', { n: 21 });
    expect(second.env).toMatchObject({ ok: true, data: { fib: '10946' } });

    const pids = workerPids(c.stderr()).slice(1);
    expect(pids).toContain(b);
    await c.client.close();
    await until(
      () => pids.every((p) => !alive(p)),
      20_000,
      () => `workers ${pids.join(', ')} still running`,
    );
    expect(auditEntries(s).filter((e) => e.type === 'forge.called')).toHaveLength(2);
    // Stopped cleanly, each removed its presence record (the replacement of the killed worker took its name).
    const after = JSON.parse((await runCli(['status', '--json'], { cwd: s.project, env: s.env })).stdout) as { members: unknown[] };
    expect(after.members).toEqual([]);
    expect((await runCli(['audit', 'verify'], { cwd: s.project, env: s.env })).code).toBe(0);
  });

  it('refuses a --workers that is not a number of processes, naming the flag', async () => {
    const s = scratch('forge-workers-');
    for (const bad of ['0', 'two', '300']) {
      const r = await runCli(['serve', '--workers', bad], { cwd: s.project, env: s.env });
      expect(r.code, r.stdout + r.stderr).toBe(2);
      expect(r.stderr).toContain(`--workers expects a number of worker processes from 1 to 256 (got "${bad}")`);
    }
  });
});
