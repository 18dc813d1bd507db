/** Polls `check` until it gives a value (the timeout only prevents a hang). */
export async function until<T>(what: string, check: () => Promise<T | undefined> | T | undefined, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** What a harness whose storage is a server's says about a child process killed -9. */
export interface Settles {
  /**
   * Whether the work of a child killed -9 can no longer land (a database: the child's server
   * sessions have ended, each last statement committed or rolled back; until then a COMMIT the
   * server already had may still complete). Storage in files needs none: a killed process writes
   * nothing more.
   */
  settled?(): Promise<boolean>;
}

/**
 * Around `kill`, a SIGKILL of a child at work: first checks that the storage tells a child at
 * work from one gone (else the wait would wait for nothing), then waits until the killed child's
 * work can no longer land.
 */
export async function killSettled(h: Settles, kill: () => Promise<void>): Promise<void> {
  const { settled } = h;
  if (settled && (await settled())) throw new Error('the storage shows no session of the child at work: settled() cannot tell');
  await kill();
  if (settled) await until("the killed child's sessions to end", async () => (await settled()) || undefined, 120_000);
}
