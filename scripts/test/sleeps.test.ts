import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

/**
 * A test waits for the event, not for a fixed time (packages/test-utils: waitFor): a sleep that
 * hopes something has happened by then fails on a loaded machine and wastes time on a quiet one.
 * The one kind allowed is a sleep that lets time pass on purpose (for a check that nothing
 * happens, which has no event to wait for), said by a `Lets time pass:` comment on it or on one of
 * the four lines above. Sleeps inside tools' code and fixtures' processes (which are meant to
 * pause) are not the test waiting; `time.sleep`/`pg_sleep` and fixtures/ directories are skipped.
 */
const root = fileURLToPath(new URL('../..', import.meta.url));
const SLEEP = /(?<![.\w])sleep\(|setTimeout\(\s*(?:r|res|resolve|release)\s*,/;
const DEFINES = /(?:const|function)\s+sleep\b|promisify\(setTimeout\)/;

function testFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.name === 'node_modules' || e.name === 'fixtures') continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...testFiles(p));
    else if (/\.(ts|mjs)$/.test(e.name)) out.push(p);
  }
  return out;
}

it('no test sleeps a fixed time to wait for something, unless a comment says it lets time pass on purpose', () => {
  const bare: string[] = [];
  for (const area of ['packages', 'apps']) {
    for (const pkg of readdirSync(join(root, area))) {
      let files: string[];
      try {
        files = testFiles(join(root, area, pkg, 'test'));
      } catch {
        continue;
      }
      for (const file of files) {
        const lines = readFileSync(file, 'utf8').split('\n');
        lines.forEach((line, i) => {
          if (!SLEEP.test(line) || DEFINES.test(line)) return;
          if (lines.slice(Math.max(0, i - 4), i + 1).some((l) => l.includes('Lets time pass'))) return;
          bare.push(`${relative(root, file)}:${i + 1}: ${line.trim()}`);
        });
      }
    }
  }
  expect(bare, 'wait for the event (waitFor from @forge/test-utils), or say why time must pass with a `Lets time pass:` comment').toEqual(
    [],
  );
});
