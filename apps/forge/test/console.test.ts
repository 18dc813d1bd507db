import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { generateSigningKeys } from '@forge/audit-chain';
import { scaled, waitFor } from '@forge/test-utils';
import { beforeAll, describe, expect, it } from 'vitest';
import { forgeTool, launchChromium, openConsole, type RunningConsole, shot, startConsole, withProposal } from './browser.js';
import { connect, requireCliAndSandbox, rugGateway, runCli, scratch } from './helpers.js';
import { auditEntries, forge, forgeJson } from './toolsmith-helpers.js';

/**
 * `forge console` in a real Chromium (Debian's, driven by playwright-core) against a real forge:
 * proposals made and validated by the toolsmith in the sandbox, calls run, the audit log on disk.
 * Each page is loaded with no CSP violation and no script error, and a screenshot is kept.
 */

beforeAll(requireCliAndSandbox);

const T = () => scaled(60_000);

// A browser test takes several steps, each of which may wait on a loaded machine.
describe('forge console in a browser', { timeout: scaled(240_000) }, () => {
  it('every page loads; approving a proposal in the page makes its tool callable and is audited via console', async () => {
    const s = scratch('forge-console-');
    const { agent, proposal } = await withProposal(s);
    const p = { proposal };
    const con = await startConsole(s);
    const browser = await launchChromium();
    const { page, problems } = await openConsole(browser, con);

    // The token left the address bar for a cookie.
    expect(page.url()).toBe(`${con.origin}/`);
    await page.getByTestId('overview').waitFor();
    await page.getByTestId('checks').waitFor();
    await page.getByTestId('chart-calls').locator('canvas').waitFor();
    await expect(page.getByTestId('operator').textContent()).resolves.toBe('acting as alice');
    await shot(page, 'overview');

    await page.goto(`${con.origin}/#/tools`);
    await page.getByTestId('tools').waitFor();
    await shot(page, 'tools');

    await page.goto(`${con.origin}/#/runs`);
    await page.getByTestId('runs').waitFor();
    await shot(page, 'runs');

    await page.goto(`${con.origin}/#/audit`);
    await page.locator('[data-testid=verdict][data-ok=true]').waitFor({ timeout: T() });
    const entries = Number(await page.getByTestId('verdict').getAttribute('data-entries'));
    expect(entries).toBe(auditEntries(s).length);
    await shot(page, 'audit');

    await page.goto(`${con.origin}/#/policy`);
    await page.getByTestId('policy-rules').waitFor();
    await page.getByTestId('persona').selectOption('*');
    const mode = page.getByTestId('persona-rules').locator('tr', { hasText: 'toolsmith.mode' });
    await expect(mode.textContent()).resolves.toBe(`toolsmith.mode"governed"${join(s.project, '.forge', 'policy.json')}`);
    await shot(page, 'policy');

    await page.goto(`${con.origin}/#/approvals/${p.proposal.id}`);
    await page.getByTestId('review').waitFor();
    await expect(page.getByTestId('impl').textContent()).resolves.toContain('[::-1]');
    await shot(page, 'approvals');
    const changed = agent.nextListChanged(60_000);
    await page.getByTestId('approve').click();
    await page.getByTestId('decision').waitFor({ timeout: T() });
    await expect(page.getByTestId('decision').textContent()).resolves.toMatch(
      /^approved: text\.reverse v1 is live \(sha256:[0-9a-f]{12}…\)$/,
    );
    await changed;
    const { env } = await agent.call('text__reverse', { text: 'console' });
    expect(env).toMatchObject({ ok: true, data: { reversed: 'elosnoc' } });
    const approved = auditEntries(s).filter((e) => e.type === 'toolsmith.approved');
    expect(approved.map((e) => e.data)).toMatchObject([{ id: p.proposal.id, by: 'alice', via: 'console' }]);
    expect(problems).toEqual([]);
  });

  it('rejecting in the page records the reason; an operator policy does not list cannot approve', async () => {
    const s = scratch('forge-console-');
    const p = { proposal: (await withProposal(s)).proposal };
    const browser = await launchChromium();

    const mallory = await startConsole(s, ['--as', 'mallory']);
    const m = await openConsole(browser, mallory);
    await m.page.goto(`${mallory.origin}/#/approvals/${p.proposal.id}`);
    await m.page.getByTestId('approve').click();
    await m.page.getByTestId('decision').waitFor({ timeout: T() });
    await expect(m.page.getByTestId('decision').textContent()).resolves.toBe(
      '"mallory" may not approve proposals: not in policy toolsmith.approvers (alice, bob)',
    );

    const con = await startConsole(s);
    const { page, problems } = await openConsole(browser, con);
    await page.goto(`${con.origin}/#/approvals/${p.proposal.id}`);
    await page.getByTestId('reason').fill('reverses only ASCII correctly; handle grapheme clusters');
    await page.getByTestId('reject').click();
    await page.getByTestId('decision').waitFor({ timeout: T() });
    await expect(page.getByTestId('decision').textContent()).resolves.toBe('rejected: text.reverse');
    const rejected = auditEntries(s).filter((e) => e.type === 'toolsmith.rejected');
    expect(rejected.map((e) => e.data)).toMatchObject([
      { id: p.proposal.id, by: 'alice', via: 'console', reason: 'reverses only ASCII correctly; handle grapheme clusters' },
    ]);
    const shown = await forgeJson<{ proposal: { state: string } }>(s, ['toolsmith', 'show', p.proposal.id]);
    expect(shown.data.proposal.state).toBe('rejected');
    expect(problems).toEqual([]);
    // The refusal is an answer (409 with the reason), which the browser also logs as a failed load.
    expect(m.problems).toEqual(['console error: Failed to load resource: the server responded with a status of 409 (Conflict)']);
  });

  it('text an agent wrote (HTML, terminal escapes, bidi controls) shows inert', async () => {
    const s = scratch('forge-console-');
    const hostile = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script> \u001b]0;owned\u0007 \u202eevil\u202c \u200b';
    await forgeTool(s, 'hostile', { description: hostile });
    const con = await startConsole(s);
    const browser = await launchChromium();
    const { page, problems } = await openConsole(browser, con);
    await page.goto(`${con.origin}/#/tools`);
    await page.getByText('hostile', { exact: true }).click();
    const text = await page.locator('[data-testid=tools] .prose').first().textContent();
    expect(text).toBe(
      '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script> \\x1b]0;owned\\x07 \\u202eevil\\u202c \\u200b',
    );
    expect(await page.evaluate(() => (globalThis as { __pwned?: number }).__pwned)).toBeUndefined();
    expect(await page.locator('[data-testid=tools] img, [data-testid=tools] script').count()).toBe(0);
    await shot(page, 'inert-text');
    expect(problems).toEqual([]);

    // The page shows the address it has once it listens for changes, even one changed before it
    // could hear it (here with no event at all, so this does not depend on timing).
    const early = await page.context().newPage();
    await early.addInitScript({
      content: `addEventListener('DOMContentLoaded', () => history.replaceState(null, '', '#/tools'), { once: true });`,
    });
    await early.goto(`${con.origin}/`);
    await early.getByTestId('tools').waitFor({ timeout: T() });
    await early.close();
  });

  it('a one-byte edit to the log on disk is caught by the page at the entry forge audit verify names, without a restart', async () => {
    const s = scratch('forge-console-');
    await forgeTool(s);
    for (let i = 0; i < 2; i++) expect((await forge(s, ['tools', 'call', 'echo', JSON.stringify({ n: i })])).code).toBe(0);
    expect(auditEntries(s).length).toBeGreaterThanOrEqual(3);
    const con = await startConsole(s);
    const browser = await launchChromium();
    const { page, problems } = await openConsole(browser, con);
    await page.goto(`${con.origin}/#/audit`);
    await page.locator('[data-testid=verdict][data-ok=true]').waitFor({ timeout: T() });

    const log = join(s.home, 'audit', 'forge.log');
    const bytes = readFileSync(log);
    const lines = bytes.toString('utf8').split('\n');
    // A byte inside the data of the third entry's line: its hash no longer matches.
    const at = lines.slice(0, 2).join('\n').length + 1 + (lines[2] as string).indexOf('"data":') + 9;
    bytes[at] = (bytes[at] as number) ^ 0x01;
    writeFileSync(log, bytes);
    const cli = await forgeJson<{ ok: boolean; first_bad: { seq: number; reason: string; line: number } }>(s, ['audit', 'verify']);
    expect(cli.data.ok).toBe(false);

    await page.getByTestId('verify').click();
    const verdict = page.locator('[data-testid=verdict][data-ok=false]');
    await verdict.waitFor({ timeout: T() });
    expect(await verdict.getAttribute('data-seq')).toBe(String(cli.data.first_bad.seq));
    expect(await verdict.getAttribute('data-reason')).toBe(cli.data.first_bad.reason);
    const bad = page.locator(`tr[data-seq="${cli.data.first_bad.seq}"]`);
    expect(await bad.getAttribute('data-state')).toBe('bad');
    await shot(page, 'audit-tampered');
    expect(problems).toEqual([]);
  });

  it("a run's page: its facts, its artifacts as downloads that never render, and only for a persona the runner lets read it", async () => {
    const s = scratch('forge-console-');
    await forgeTool(s, 'report', {
      description: 'Writes an HTML report.',
      input_schema: { type: 'object', properties: {}, additionalProperties: false },
      impl: [
        'import json',
        'open("/forge/artifacts/report.html", "w").write("<script>window.__pwned=1</script>")',
        'print(json.dumps({"ok": True, "data": {"written": 1}}))',
      ].join('\n'),
    });
    const called = await forgeJson<{ ok: boolean; meta: { run_id: string } }>(s, ['tools', 'call', 'report', '{}']);
    expect(called.data.ok).toBe(true);
    const runId = called.data.meta.run_id;

    const con = await startConsole(s);
    const browser = await launchChromium();
    const { page, problems } = await openConsole(browser, con);
    // The tool's own figures: its calls and latency over the day, drawn when its row is opened.
    await page.goto(`${con.origin}/#/tools`);
    await page.getByText('report', { exact: true }).click();
    await page.locator('[data-testid=tool-latency-report] canvas').waitFor();
    await shot(page, 'tool');

    await page.goto(`${con.origin}/#/runs`);
    await page.getByRole('link', { name: runId }).click();
    await page.getByTestId('run').waitFor();
    const link = page.getByTestId('artifacts').getByRole('link', { name: 'report.html' });
    const href = await link.getAttribute('href');
    expect(href).toBe(`/api/runs/${runId}/download/report.html`);
    await shot(page, 'run');
    // The download is an attachment of no renderable type, sandboxed even if opened.
    const res = await page.evaluate(async (url) => {
      const r = await fetch(url);
      return {
        type: r.headers.get('content-type'),
        disposition: r.headers.get('content-disposition'),
        csp: r.headers.get('content-security-policy'),
        body: await r.text(),
      };
    }, href as string);
    expect(res).toEqual({
      type: 'application/octet-stream',
      disposition: 'attachment; filename="report.html"',
      csp: "sandbox; default-src 'none'",
      body: '<script>window.__pwned=1</script>',
    });
    expect(problems).toEqual([]);

    // Another persona's console reads no run of persona default (the runner's rule: the run's own persona or an operator).
    const other = await startConsole(s, ['--as', 'alice', '--persona', 'other']);
    const o = await openConsole(browser, other);
    await o.page.goto(`${other.origin}/#/runs/${runId}`);
    await o.page.getByTestId('error').waitFor();
    await expect(o.page.getByTestId('error').textContent()).resolves.toContain(`no run "${runId}" that persona "other" may read`);
  });

  it("forge serve --console: the console over the server's engine, its audit page following calls live", async () => {
    const s = scratch('forge-console-');
    await forgeTool(s);
    const c = await connect(s, { args: ['--console', '0', '--as', 'alice'] });
    const url = await waitFor(
      "the console address on the server's stderr",
      () => /open (http:\/\/127\.0\.0\.1:\d+\/\?token=[A-Za-z0-9_-]+)/.exec(c.stderr())?.[1],
    );
    const origin = new URL(url).origin;
    const browser = await launchChromium();
    const { page, problems } = await openConsole(browser, { url, origin } as RunningConsole);
    await page.goto(`${origin}/#/audit`);
    await page.locator('[data-testid=verdict][data-ok=true]').waitFor({ timeout: T() });
    const { env } = await c.call('echo', { n: 7 });
    expect(env.ok).toBe(true);
    // The call's entry reaches the open page without a reload, and the page verifies the log again.
    const seq = auditEntries(s).findLast((e) => e.type === 'forge.called')?.seq as number;
    await page.locator(`tr[data-seq="${seq}"][data-state=ok]`).waitFor({ timeout: T() });
    await page.locator(`[data-testid=verdict][data-ok=true][data-entries="${auditEntries(s).length}"]`).waitFor({ timeout: T() });

    // A broken policy edit: the server keeps the last good one and audits why; the overview says so, and names this server.
    writeFileSync(join(s.project, '.forge', 'policy.json'), '{"breakers": {"per_tool_rpm": "many"}}');
    await c.call('echo', { n: 8 });
    await waitFor('policy.reload_failed in the log', () => auditEntries(s).some((e) => e.type === 'policy.reload_failed'));
    await page.goto(`${origin}/#/overview`);
    const reload = await page.getByTestId('reload-error').textContent();
    expect(reload).toContain(`${join(s.project, '.forge', 'policy.json')}:1:31: breakers.per_tool_rpm must be an integer (got "many")`);
    expect(reload).toContain('(it never was valid: nothing of it is in force)');
    await expect(page.getByTestId('overview').textContent()).resolves.toMatch(/front-end serve-\d+ \(pid \d+ on /);
    expect(problems).toEqual([]);
  });

  it('the gateway page: tools against their pins, approving exactly the definitions shown, unpinning; all audited', async () => {
    const s = scratch('forge-console-');
    rugGateway(s);
    const con = await startConsole(s);
    const browser = await launchChromium();
    const { page, problems } = await openConsole(browser, con);
    await page.goto(`${con.origin}/#/gateway`);
    await page.getByRole('link', { name: 'rug' }).click();
    // What the approval covers besides the tools: how the server runs, from which file.
    // Exactly the parts its digest is made of, the files that run with their digests among them.
    const declared = (await page.getByTestId('gateway-server').textContent()) ?? '';
    expect(declared).toContain('gateway-upstream.mjs');
    expect(declared).toMatch(/files[\s\S]*sha256:[0-9a-f]{64}/);
    const hello = page.locator('[data-testid=gateway-tools] tr[data-tool=hello]');
    await expect(hello.getAttribute('data-status')).resolves.toBe('new');
    await page.getByLabel('approve hello').check();
    await page.getByTestId('gateway-approve').click();
    await page.getByTestId('gateway-decision').waitFor({ timeout: T() });
    await expect(page.getByTestId('gateway-decision').textContent()).resolves.toBe('pinned rug.hello');
    await page.locator('[data-testid=gateway-tools] tr[data-tool=hello][data-status=approved]').waitFor({ timeout: T() });
    await shot(page, 'gateway');
    const approved = auditEntries(s).filter((e) => e.type === 'gateway.approved');
    expect(approved.map((e) => e.data)).toMatchObject([{ server: 'rug', by: 'operator:alice', via: 'console' }]);

    // An approval names what was reviewed: a tool digest or a server definition digest that is not
    // the one now pins nothing, and one that names no server definition is refused.
    const tries = await page.evaluate(
      async (zero) => {
        const { csrf } = (await (await fetch('/api/session')).json()) as { csrf: string };
        const servers = (await (await fetch('/api/gateway')).json()) as { name: string; definitionDigest: string }[];
        const shown = servers.find((x) => x.name === 'rug')?.definitionDigest;
        const hello = ((await (await fetch('/api/gateway/rug/tools')).json()) as { tool: string; digest: string }[]).find(
          (t) => t.tool === 'hello',
        )?.digest;
        const approve = async (body: unknown) => {
          const r = await fetch('/api/gateway/rug/approve', {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'x-forge-csrf': csrf },
            body: JSON.stringify(body),
          });
          return { status: r.status, kind: ((await r.json()) as { kind: string }).kind };
        };
        return [
          await approve({ expect: { add: zero }, definition: shown }),
          await approve({ expect: { hello }, definition: zero }),
          await approve({ expect: { hello } }),
        ];
      },
      `sha256:${'0'.repeat(64)}`,
    );
    expect(tries).toEqual([
      { status: 409, kind: 'state_conflict' },
      { status: 409, kind: 'state_conflict' },
      { status: 400, kind: 'validation_failed' },
    ]);
    expect(auditEntries(s).filter((e) => e.type === 'gateway.approved')).toHaveLength(1);

    await page.getByTestId('unpin-hello').click();
    await page.locator('[data-testid=gateway-tools] tr[data-tool=hello][data-status=new]').waitFor({ timeout: T() });
    expect(
      auditEntries(s)
        .filter((e) => e.type === 'gateway.unpinned')
        .map((e) => e.data),
    ).toMatchObject([{ server: 'rug', by: 'operator:alice', via: 'console' }]);
    // The refusals above are answers the browser also logs as failed loads.
    expect(problems).toEqual([
      'console error: Failed to load resource: the server responded with a status of 409 (Conflict)',
      'console error: Failed to load resource: the server responded with a status of 409 (Conflict)',
      'console error: Failed to load resource: the server responded with a status of 400 (Bad Request)',
    ]);
  });

  it('checkpoint signatures checked in the page: the configured key verifies, a pasted other key finds no checkpoint it signed', async () => {
    const s = scratch('forge-console-');
    const keys = generateSigningKeys();
    const keyFile = join(s.root, 'audit.key');
    writeFileSync(keyFile, keys.privateKey, { mode: 0o600 });
    s.env.FORGE_AUDIT_KEY = keyFile;
    await forgeTool(s);
    expect((await forge(s, ['tools', 'call', 'echo', '{"n":1}'])).code).toBe(0);
    const con = await startConsole(s);
    const browser = await launchChromium();
    const { page, problems } = await openConsole(browser, con);
    await page.goto(`${con.origin}/#/audit`);
    const ok = page.locator('[data-testid=verdict][data-ok=true]');
    await ok.waitFor({ timeout: T() });
    // The configured key's public half is filled in, and at least one checkpoint it signed was used.
    await expect(page.getByTestId('public-key').inputValue()).resolves.toBe(keys.publicKey);
    expect(await ok.textContent()).toMatch(/; [1-9]\d* checkpoint\(s\) used/);

    const other = generateSigningKeys().publicKey;
    writeFileSync(join(s.root, 'other.pub'), other);
    await page.getByText('Public key (checkpoints must be signed by it)').click();
    await page.getByTestId('public-key').fill(other);
    await page.getByTestId('verify').click();
    const bad = page.locator('[data-testid=verdict][data-ok=false]');
    await bad.waitFor({ timeout: T() });
    await expect(bad.getAttribute('data-reason')).resolves.toBe('signature_invalid');
    await expect(bad.getAttribute('data-seq')).resolves.toBe('0');
    // As forge audit verify says it, with that key.
    const cli = await runCli(['audit', 'verify', '--json', '--key-pub', join(s.root, 'other.pub')], { cwd: s.project, env: s.env });
    expect(JSON.parse(cli.stdout)).toMatchObject({ ok: false, first_bad: { seq: 0, reason: 'signature_invalid' } });
    expect(problems).toEqual([]);
  });
});
