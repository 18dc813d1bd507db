import { scaled } from '@forge/test-utils';
import { describe, expect, it } from 'vitest';
import { launchChromium, openConsole, startConsole } from './browser.js';
import { scratch } from './helpers.js';
import { usePostgres } from './postgres-helpers.js';

/**
 * `forge console --store postgres://…`: the log is the database's, which the page cannot verify as
 * files; the audit page says so (and how to verify it), and the other pages work.
 */

const server = usePostgres();

describe('forge console over a database', { timeout: scaled(240_000) }, () => {
  it('the audit page says why it cannot verify a database log; the overview names the store', async () => {
    const s = scratch('forge-console-pg-');
    s.env.FORGE_STORE = await server.database();
    const con = await startConsole(s);
    const browser = await launchChromium();
    const { page } = await openConsole(browser, con);
    await page.getByTestId('overview').waitFor();
    await expect(page.getByTestId('audit-where').textContent()).resolves.toMatch(/^postgres:\/\//);
    await page.goto(`${con.origin}/#/audit`);
    const verdict = page.locator('[data-testid=verdict][data-ok=error]');
    await verdict.waitFor({ timeout: scaled(60_000) });
    await expect(verdict.textContent()).resolves.toMatch(
      /^could not verify: the console's audit page reads the file log under .*; this forge keeps its log in postgres:\/\/.* \(read it with forge audit verify\)$/,
    );
    expect(await verdict.textContent()).not.toContain('hunter');
    await page.goto(`${con.origin}/#/runs`);
    await page.getByTestId('runs').waitFor();
  });
});
