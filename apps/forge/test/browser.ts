import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { scaled } from '@forge/test-utils';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';
import { onTestFinished } from 'vitest';
import { CLI, type Connected, type Scratch } from './helpers.js';
import { forge, type Proposed, propose, reverseBlueprint, serveAs, writePolicy } from './toolsmith-helpers.js';

/** Where the console tests keep their screenshots (not compared: kept for a person to look at). */
export const SHOTS = resolve(import.meta.dirname, '../test-artifacts/console');

/** Debian's Chromium, or $FORGE_CHROMIUM; a test that needs it fails with the install hint when it is missing. */
export function chromiumPath(): string {
  const found = [process.env.FORGE_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => p && existsSync(p));
  if (!found)
    throw new Error(
      'the console tests drive a real Chromium and none was found: install it with "apt-get install -y chromium" (bash scripts/setup.sh does), or set FORGE_CHROMIUM to its path',
    );
  return found;
}

/** A headless Chromium, closed when the test finishes. */
export async function launchChromium(): Promise<Browser> {
  const browser = await chromium.launch({ executablePath: chromiumPath(), timeout: scaled(120_000) });
  onTestFinished(() => browser.close());
  return browser;
}

/** A running `forge console`: its address (with the token) and origin. */
export interface RunningConsole {
  url: string;
  origin: string;
  child: ChildProcess;
  stderr(): string;
}

/** Starts `forge console --json` over the scratch home and project; stopped (SIGTERM, then awaited) when the test finishes. */
export async function startConsole(
  s: Scratch,
  args: string[] = ['--as', 'alice'],
  env: Record<string, string> = {},
): Promise<RunningConsole> {
  const child = spawn(process.execPath, [CLI, 'console', '--json', ...args], {
    cwd: s.project,
    env: { ...s.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  onTestFinished(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
  });
  const url = await new Promise<string>((res, rej) => {
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const nl = out.indexOf('\n');
      if (nl >= 0) res((JSON.parse(out.slice(0, nl)) as { url: string }).url);
    });
    child.once('exit', (code) => rej(new Error(`forge console exited (${code}) before it printed its address: ${err}`)));
  });
  return { url, origin: new URL(url).origin, child, stderr: () => err };
}

/** A fresh browser context (its own cookies) with the console open and logged in; fails the test on any CSP violation or page error. */
export async function openConsole(
  browser: Browser,
  con: RunningConsole,
): Promise<{ context: BrowserContext; page: Page; problems: string[] }> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  onTestFinished(() => context.close());
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console error: ${m.text()}`);
  });
  // A loaded 2-core machine runs Chromium's processes beside the suite's: waits are generous, and scale.
  page.setDefaultTimeout(scaled(60_000));
  const said: string[] = [];
  page.on('console', (m) => said.push(`${m.type()}: ${m.text()}`));
  page.on('requestfailed', (r) => said.push(`request failed: ${r.method()} ${r.url()} ${r.failure()?.errorText ?? ''}`));
  // On failure: what the page showed and said, and a screenshot, for whoever reads the log. In a
  // finished hook (vitest runs failed hooks after the finished ones, when the page is closed),
  // registered after the context's close, so it runs before it.
  onTestFinished(async ({ task }) => {
    if (task.result?.state !== 'fail') return;
    const name = `failed-${new URL(con.origin).port}`;
    const text = await page
      .locator('body')
      .textContent({ timeout: 5000 })
      .catch((e: Error) => `(no text: ${e.message})`);
    await shot(page, name).catch(() => {});
    process.stderr.write(
      `console page ${page.url()} at failure (screenshot ${join(SHOTS, `${name}.png`)}):\n${text}\n${said.join('\n')}\nconsole stderr: ${typeof con.stderr === 'function' ? con.stderr() : '(not ours)'}\n`,
    );
  });
  await page.goto(con.url);
  return { context, page, problems };
}

/** Keeps a screenshot of `page` as a test artifact. */
export async function shot(page: Page, name: string): Promise<void> {
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

/**
 * Forges a Python tool from `impl` in the scratch project with the CLI (persona default), and
 * fails the test if it is refused. The default echoes its input back.
 */
export async function forgeTool(
  s: Scratch,
  name = 'echo',
  o: { description?: string; impl?: string; input_schema?: Record<string, unknown> } = {},
): Promise<void> {
  const spec = {
    name,
    description: o.description ?? 'Echoes its input.',
    input_schema: o.input_schema ?? { type: 'object', properties: { n: { type: 'integer' } }, additionalProperties: false },
    runtime: 'python3',
    impl: o.impl ?? 'import json, sys\nprint(json.dumps({"ok": True, "data": json.load(sys.stdin)}))\n',
  };
  writeFileSync(join(s.project, `${name}.json`), JSON.stringify(spec));
  const made = await forge(s, ['tools', 'forge', `${name}.json`]);
  if (made.code !== 0) throw new Error(`forging ${name} was refused: ${made.stderr}`);
}

/** A governed project with one validated proposal (text.reverse by persona agent) and the agent's MCP session. */
export async function withProposal(s: Scratch): Promise<{ agent: Connected; proposal: Proposed['proposal'] }> {
  writePolicy(s);
  const agent = await serveAs(s);
  const p = await propose(agent, reverseBlueprint());
  if (p.proposal.state !== 'validated') throw new Error(`the proposal is ${p.proposal.state}, not validated: ${JSON.stringify(p)}`);
  return { agent, proposal: p.proposal };
}
