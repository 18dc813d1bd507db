import { spawn } from 'node:child_process';

/**
 * Runs `node --input-type=module -e code` in `cwd` until it prints `marker` on stdout, then kills it
 * with SIGKILL and waits for it to be gone: what a process killed at that point leaves behind
 * (a lock it held, a directory it staged) is then there to be found. Rejects when it exits first.
 */
export async function killedAfter(code: string, marker: string, cwd: string): Promise<void> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], { cwd, stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on('data', (d: Buffer) => d.toString().includes(marker) && resolve());
    child.once('exit', (c) => reject(new Error(`the child exited ${c} before printing "${marker}"`)));
  });
  const gone = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await gone;
}
