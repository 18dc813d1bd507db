import { symlinkSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { scaled } from '@forge/test-utils';
import fc from 'fast-check';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { launchChromium, openConsole, startConsole, withProposal } from './browser.js';
import { requireCliAndSandbox, runCli, scratch } from './helpers.js';
import { auditEntries, forge, forgeJson } from './toolsmith-helpers.js';

/**
 * Who may use `forge console`: whoever opened the address it printed. Everything else (a wrong or
 * missing token, no cookie, a rebinding Host, another origin, a change without the CSRF token) is
 * refused, over real HTTP against a real console, and from a real page of another origin.
 */

beforeAll(requireCliAndSandbox);

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One raw HTTP request (any Host header), answered whole. */
function ask(url: string, o: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: o.method ?? 'GET', headers: o.headers ?? {} }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end(o.body);
  });
}

/** Logs in with the printed address: the session cookie, and the CSRF token the page would read. */
async function login(url: string): Promise<{ cookie: string; csrf: string; origin: string }> {
  const r = await ask(url);
  expect(r.status).toBe(303);
  const cookie = String(r.headers['set-cookie']).split(';')[0] as string;
  const origin = new URL(url).origin;
  const s = await ask(`${origin}/api/session`, { headers: { cookie } });
  return { cookie, csrf: (JSON.parse(s.body) as { csrf: string }).csrf, origin };
}

describe('forge console access', { timeout: scaled(240_000) }, () => {
  it('refuses a wrong token, no cookie, a rebinding Host, another origin, and a change without its CSRF token', async () => {
    const s = scratch('forge-console-access-');
    const con = await startConsole(s);
    const origin = con.origin;
    const port = new URL(origin).port;

    const wrong = await ask(`${origin}/?token=${'A'.repeat(43)}`);
    expect(wrong.status).toBe(401);
    expect(wrong.headers['set-cookie']).toBeUndefined();
    expect(wrong.body).toBe("that console token is not this launch's: open the address forge console printed last\n");
    for (const path of ['/', '/assets/app.js', '/api/overview', '/api/audit/raw/forge.log']) {
      const r = await ask(`${origin}${path}`);
      expect([path, r.status]).toEqual([path, 401]);
    }

    const { cookie, csrf } = await login(con.url);
    const ok = await ask(`${origin}/api/overview`, { headers: { cookie } });
    expect(ok.status).toBe(200);
    expect(ok.headers['content-security-policy']).toBe(
      "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    );
    expect(ok.headers['x-frame-options']).toBe('DENY');

    const rebound = await ask(`${origin}/api/overview`, { headers: { cookie, host: `evil.example:${port}` } });
    expect(rebound.status).toBe(403);
    expect(rebound.body).toBe(`Host "evil.example:${port}" is not this console's: open it at http://127.0.0.1:${port}/\n`);
    const foreign = await ask(`${origin}/api/session`, { headers: { cookie, origin: 'http://127.0.0.1:1' } });
    expect(foreign.status).toBe(403);
    expect(foreign.body).toContain('"http://127.0.0.1:1" is not this console\'s own');
    const site = await ask(`${origin}/api/session`, { headers: { cookie, 'sec-fetch-site': 'cross-site' } });
    expect(site.status).toBe(403);

    const approve = `${origin}/api/proposals/p-0000000000000000/approve`;
    const json = { 'content-type': 'application/json' };
    const noOrigin = await ask(approve, { method: 'POST', headers: { cookie, ...json, 'x-forge-csrf': csrf }, body: '{}' });
    expect(noOrigin.status).toBe(403);
    const noCsrf = await ask(approve, { method: 'POST', headers: { cookie, ...json, origin }, body: '{}' });
    expect(noCsrf.status).toBe(403);
    expect(JSON.parse(noCsrf.body)).toMatchObject({ ok: false, kind: 'csrf' });
    const badCsrf = await ask(approve, {
      method: 'POST',
      headers: { cookie, ...json, origin, 'x-forge-csrf': `${csrf.slice(1)}x` },
      body: '{}',
    });
    expect(badCsrf.status).toBe(403);
    const form = await ask(approve, {
      method: 'POST',
      headers: { cookie, origin, 'x-forge-csrf': csrf, 'content-type': 'text/plain' },
      body: '{}',
    });
    expect(form.status).toBe(400);
    const through = await ask(approve, { method: 'POST', headers: { cookie, ...json, origin, 'x-forge-csrf': csrf }, body: '{}' });
    expect(through.status).toBe(409);
    // Through every check to the toolsmith itself, which decides (alice is no approver here).
    expect(JSON.parse(through.body)).toMatchObject({ ok: false, kind: 'policy_denied' });
  });

  it("serves the audit log's own files only: never another file of its directory, never through a link", async () => {
    const s = scratch('forge-console-access-');
    expect((await forge(s, ['tools', 'list'])).code).toBe(0);
    writeFileSync(join(s.home, 'secret.txt'), 'not for the page');
    symlinkSync(join(s.home, 'secret.txt'), join(s.home, 'audit', 'forge.log.000001'));
    const con = await startConsole(s);
    const { cookie, origin } = await login(con.url);
    for (const name of ['..%2Fsecret.txt', 'forge.log.lock', '%2Fetc%2Fpasswd', 'forge.log.000001']) {
      const r = await ask(`${origin}/api/audit/raw/${name}`, { headers: { cookie } });
      expect([name, r.status === 200]).toEqual([name, false]);
      expect(r.body).not.toContain('not for the page');
    }
    // Property: any spelling of a name (encoded separators, dots, NULs, unicode, the log's name
    // with anything around it) is answered with a file's bytes only when it is exactly one of the
    // log's own files, and never with the secret beside them.
    const own = new Set(['forge.log', 'forge.log.checkpoints']);
    const piece = fc.constantFrom(
      '..',
      '.',
      '/',
      '%2F',
      '%2f',
      '%2e%2e',
      '%00',
      '\\',
      'forge.log',
      'secret.txt',
      '000001',
      'checkpoints',
      '..%2F',
      '%252F',
      'ｆorge.log',
      ' ',
    );
    await fc.assert(
      fc.asyncProperty(fc.array(piece, { minLength: 1, maxLength: 6 }), async (parts) => {
        const name = parts.join('');
        const r = await ask(`${origin}/api/audit/raw/${encodeURI(name)}`, { headers: { cookie } });
        expect(r.body).not.toContain('not for the page');
        if (r.status === 200) expect(own.has(decodeURIComponent(encodeURI(name)))).toBe(true);
      }),
      { numRuns: 200 },
    );
  });

  it('a page of another origin cannot read or change anything, even in the browser that is logged in', async () => {
    const s = scratch('forge-console-access-');
    const p = { proposal: (await withProposal(s)).proposal };
    const con = await startConsole(s);
    const browser = await launchChromium();
    const { context, page } = await openConsole(browser, con);
    await page.getByTestId('overview').waitFor();
    // A hostile page on another loopback port, in the same browser (it holds the console's cookie).
    const evil = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end('<!doctype html><title>evil</title>');
    });
    await new Promise<void>((r) => evil.listen(0, '127.0.0.1', r));
    onTestFinished(() => new Promise<void>((r) => evil.close(() => r())));
    const other = await context.newPage();
    await other.goto(`http://127.0.0.1:${(evil.address() as AddressInfo).port}/`);
    const tried = await other.evaluate(
      async ({ target, id }) => {
        const out: string[] = [];
        for (const [method, path] of [
          ['GET', '/api/session'],
          ['POST', `/api/proposals/${id}/reject`],
        ]) {
          try {
            const r = await fetch(`${target}${path}`, {
              method,
              credentials: 'include',
              ...(method === 'POST' ? { headers: { 'content-type': 'text/plain' }, body: '{"reason":"x"}' } : {}),
            });
            out.push(`${path}: ${r.status}`);
          } catch {
            out.push(`${path}: blocked`);
          }
        }
        // Not even an opaque answer: Cross-Origin-Resource-Policy keeps it from another origin.
        try {
          await fetch(`${target}/api/session`, { mode: 'no-cors', credentials: 'include' });
          out.push('no-cors: answered');
        } catch {
          out.push('no-cors: blocked');
        }
        return out;
      },
      { target: con.origin, id: p.proposal.id },
    );
    expect(tried).toEqual(['/api/session: blocked', `/api/proposals/${p.proposal.id}/reject: blocked`, 'no-cors: blocked']);
    // The reject was sent (a simple request needs no preflight, and the cookie goes to the same
    // site), and refused by its Origin: the proposal is still waiting, and nothing was recorded.
    const shown = await forgeJson<{ proposal: { state: string } }>(s, ['toolsmith', 'show', p.proposal.id]);
    expect(shown.data.proposal.state).toBe('validated');
    expect(auditEntries(s).filter((e) => e.type === 'toolsmith.rejected')).toEqual([]);
    const still = await page.evaluate(async () => (await fetch('/api/session')).status);
    expect(still).toBe(200);
  });

  it('usage errors name the flag and the fix (exit 2), before anything listens', async () => {
    const s = scratch('forge-console-access-');
    const run = (args: string[]) => runCli(args, { cwd: s.project, env: s.env });
    const port = await run(['console', '--port', '99999']);
    expect([port.code, port.stderr.split('\n')[0]]).toEqual([2, 'forge: --port expects a port number from 0 to 65535 (got "99999")']);
    const as = await run(['serve', '--as', 'alice']);
    expect([as.code, as.stderr.split('\n')[0]]).toEqual([2, "forge: --as names the console's operator: it goes with --console PORT"]);
    const consolePort = await run(['serve', '--console', 'x']);
    expect([consolePort.code, consolePort.stderr.split('\n')[0]]).toEqual([
      2,
      'forge: --console expects a port from 0 (a free one) to 65535 (got "x")',
    ]);
  });
});
