/** What a host probe reports (the shape of @forge/sandbox's `probe()`, which this package cannot import: it is below it). */
export interface HostReport {
  ok: boolean;
  problems: { message: string; fix: string }[];
}

/**
 * Fails (never skips) when `probe` finds that this host cannot sandbox, naming each problem with
 * its fix and the install command: a test that exists to prove the sandbox holds must not pass
 * silently on a host without bwrap. Callers pass @forge/sandbox's `probe`.
 */
export async function requireSandbox(probe: () => Promise<HostReport>): Promise<void> {
  const host = await probe();
  if (!host.ok) {
    throw new Error(
      `these tests need a working bwrap sandbox (apt-get install -y bubblewrap): ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')}`,
    );
  }
}
