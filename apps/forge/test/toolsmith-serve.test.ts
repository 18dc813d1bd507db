import { waitFor } from '@forge/test-utils';
import { beforeAll, describe, expect, it } from 'vitest';
import { requireCliAndSandbox, scratch, until } from './helpers.js';
import { auditEntries, forge, forgeJson, GOVERNED, propose, reverseBlueprint, serveAs, writePolicy } from './toolsmith-helpers.js';

/**
 * The toolsmith beside a running `forge serve`: the kill switch written into the workspace policy
 * stops every step at once, in the server and in the CLI, and lifting it resumes them, with no
 * restart; the server's periodic cycle follows the policy's interval and the kill switch.
 */

beforeAll(requireCliAndSandbox);

type GapRow = { signature: string; count: number };

const gapCount = async (s: ReturnType<typeof scratch>, signature: string): Promise<number> =>
  (await forgeJson<GapRow[]>(s, ['toolsmith', 'gaps'])).data.find((g) => g.signature === signature)?.count ?? 0;

/** Runs `write` (a new policy) and waits until the server has loaded it (a policy.reloaded entry after it). */
async function loaded(s: ReturnType<typeof scratch>, write: () => void): Promise<void> {
  const looks = () => auditEntries(s).filter((e) => e.type === 'policy.reloaded').length;
  const seen = looks();
  write();
  await waitFor('the server to load the new policy (policy.reloaded)', () => looks() > seen, { intervalMs: 250 });
}

describe('the toolsmith and forge serve', () => {
  it('the kill switch set while serve runs stops proposing, approving, cycling and gap recording; lifting it resumes all, without a restart', async () => {
    const s = scratch('forge-toolsmith-serve-');
    writePolicy(s);
    const c = await serveAs(s);
    const p = await propose(c, reverseBlueprint());
    expect(p.proposal.state).toBe('validated');
    const noted = await c.call('text.shout', {});
    expect(noted.env.error?.message).toMatch(/the toolsmith noted the request \(1 of 2/);
    expect(await gapCount(s, 'text.shout')).toBe(1);

    // The server takes a policy at its next look (audited as policy.reloaded): wait for it, or a
    // call on a busy machine can come first.
    await loaded(s, () => writePolicy(s, { ...GOVERNED, paused: true }));
    const quiet = await c.call('text.shout', {});
    expect(quiet.env).toMatchObject({ ok: false, error: { kind: 'unknown_tool' } });
    expect(quiet.env.error?.message).not.toMatch(/toolsmith/);
    expect(await gapCount(s, 'text.shout')).toBe(1);
    const paused = /^the toolsmith is paused, so nothing can be (approved|cycled|proposed): policy toolsmith\.paused is true/;
    const approve = await forgeJson<{ kind: string; message: string }>(s, ['toolsmith', 'approve', p.proposal.id, '--as', 'alice']);
    expect(approve.code, approve.stderr).toBe(1);
    expect(approve.data.kind).toBe('policy_denied');
    expect(approve.data.message).toMatch(paused);
    const cycle = await forgeJson<{ kind: string; message: string }>(s, ['toolsmith', 'cycle']);
    expect([cycle.code, cycle.data.kind]).toEqual([1, 'policy_denied']);
    expect(cycle.data.message).toMatch(paused);
    const refused = await propose(c, reverseBlueprint({ capability: 'text.upper' }));
    expect(refused).toMatchObject({ ok: false, kind: 'policy_denied', message: expect.stringMatching(paused) });
    const listed = await forge(s, ['toolsmith', 'list']);
    expect(listed.code, listed.stdout + listed.stderr).toBe(0);
    expect(listed.stderr).toContain('the toolsmith is paused: policy toolsmith.paused is true (the kill switch)');
    const doctor = await forge(s, ['doctor']);
    expect(doctor.stdout).toMatch(/^! toolsmith +PAUSED \(policy toolsmith\.paused\); governed: \*;.*1 proposal\(s\) awaiting approval/m);
    expect(auditEntries(s).some((e) => e.type === 'toolsmith.paused')).toBe(true);
    expect((await c.client.listTools()).tools.map((t) => t.name)).not.toContain('text__reverse');

    await loaded(s, () => writePolicy(s));
    const changed = c.nextListChanged(20_000);
    const approved = await forge(s, ['toolsmith', 'approve', p.proposal.id, '--as', 'alice']);
    expect(approved.code, approved.stderr).toBe(0);
    await changed;
    const { env } = await c.call('text__reverse', { text: 'on again' });
    expect(env).toMatchObject({ ok: true, data: { reversed: 'niaga no' } });
    const again = await c.call('text.shout', {});
    expect(again.env.error?.message).toMatch(
      /the toolsmith has seen "text\.shout" asked for 2 times in 24 h, so a tool for it is wanted: propose one with forge_propose/,
    );
    expect(await gapCount(s, 'text.shout')).toBe(2);
    expect((await forge(s, ['audit', 'verify'])).code).toBe(0);
  });

  it('serve runs the cycle at the interval the policy sets now, reports a wanted tool on stderr in one line, and skips while paused', async () => {
    const s = scratch('forge-toolsmith-serve-');
    writePolicy(s);
    const c = await serveAs(s);
    await c.call('text.shout', {});
    await c.call('text.shout', {});
    // The default interval is an hour: the edit to 10 s applies without a restart.
    writePolicy(s, { ...GOVERNED, cycle_interval_seconds: 10 });
    const line = 'forge toolsmith cycle: wanted: text.shout (2); 0 awaiting approval';
    await until(
      () => c.stderr().includes(line),
      40_000,
      () => `no cycle line on stderr: ${c.stderr()}`,
      250,
    );
    expect(
      c
        .stderr()
        .split('\n')
        .filter((l) => l.startsWith('forge toolsmith cycle'))[0],
    ).toBe(line);
    const cycleEntries = () => auditEntries(s).filter((e) => e.type === 'toolsmith.cycle');
    const cycles = () => cycleEntries().length;
    expect(cycles()).toBeGreaterThanOrEqual(1);

    // The server looks at the policy every 5 s; each look that finds the file changed is audited
    // as policy.reloaded. It takes the pause at its next look: from then on no cycle starts, and
    // one that had started before (a cycle takes milliseconds) ended a look earlier.
    const paused = { ...GOVERNED, cycle_interval_seconds: 10, paused: true };
    const looks = () => auditEntries(s).filter((e) => e.type === 'policy.reloaded');
    let seen = looks().length;
    writePolicy(s, paused);
    await waitFor('the server to load the paused policy', () => looks().length > seen, { intervalMs: 250 });
    const before = cycles();
    // The interval cannot be set under 10 s (the policy's minimum), so the pause must hold for real
    // time: until the server looks at the policy two intervals and one look (25 s) after the last
    // cycle, past when an unpaused server would have cycled again. Each of its looks is made visible
    // by giving it the same policy in other bytes (a newline toggled), which it reads and audits.
    const lastCycle = Date.parse(cycleEntries().at(-1)?.ts ?? '');
    const dueTwice = lastCycle + 2 * 10_000 + 5_000;
    let newline = false;
    await waitFor(
      () =>
        `the server to look at the paused policy past ${new Date(dueTwice).toISOString()} (its looks: ${JSON.stringify(looks().map((e) => e.ts))})`,
      () => {
        const all = looks();
        if (Date.parse(all.at(-1)?.ts ?? '') >= dueTwice) return true;
        if (all.length > seen) {
          seen = all.length;
          newline = !newline;
          writePolicy(s, paused, { newline });
        }
        return false;
      },
      { timeoutMs: 90_000, intervalMs: 250 },
    );
    expect(cycles()).toBe(before);
    // The skipped ticks are not refusals: nothing was asked of the paused toolsmith.
    expect(auditEntries(s).filter((e) => e.type === 'toolsmith.paused')).toEqual([]);
  });
});
