#!/usr/bin/env node
// The operator console with a large log: 100,000 audit entries of which 10,000 are calls (written
// with the audit log's own writer into a scratch FORGE_HOME), `forge console` started over it, and
// Debian's Chromium (playwright-core) loading each page cold. Prints:
//   - first paint of each page (a fresh load of the address until the page's content is there),
//     p50/p95 over BENCH_RUNS loads, and its ratio against loading the page shell alone (the same
//     server, a route that asks the API nothing), alternating; target ≤ 300 ms;
//   - in-browser verification of the whole log (WebCrypto SHA-256 of each line, links,
//     checkpoints), entries/s, against `forge-audit verify` (Node, same files) in the same run;
//     target ≥ 100,000 entries/s;
//   - the console's idle cost: CPU over 10 s with a page open and nothing happening, and its RSS.
// Never asserts. Run `pnpm build` first; needs chromium (apt-get install -y chromium).
//
//   node apps/forge/bench/console.mjs     (BENCH_RUNS=20, BENCH_ENTRIES=100000)

import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openAuditLog, verifyLog } from '@forge/audit-chain';
import { chromium } from 'playwright-core';
import { stats } from '../../../bench/baseline.mjs';

const CLI = join(dirname(fileURLToPath(import.meta.url)), '../dist/cli.js');
const RUNS = Number(process.env.BENCH_RUNS ?? 20);
const ENTRIES = Number(process.env.BENCH_ENTRIES ?? 100_000);
const CALLS = Math.round(ENTRIES / 10);
const chromiumPath = [process.env.FORGE_CHROMIUM, '/usr/bin/chromium'].find((p) => p && existsSync(p));
if (!chromiumPath) {
  console.error('this benchmark drives Chromium: apt-get install -y chromium (or set FORGE_CHROMIUM)');
  process.exit(2);
}

const root = mkdtempSync(join(tmpdir(), 'forge-console-bench-'));
let child;
let browser;
try {
  const home = join(root, 'home');
  const project = join(root, 'project');
  mkdirSync(join(project, '.forge'), { recursive: true });
  mkdirSync(join(home, 'audit'), { recursive: true, mode: 0o700 });
  const logPath = join(home, 'audit', 'forge.log');

  // The log: entries shaped like forge's own, every tenth a call of one of 20 tools.
  let t = performance.now();
  const log = await openAuditLog(logPath);
  const now = Date.now();
  const pending = [];
  for (let i = 0; i < ENTRIES; i++) {
    const call = i % 10 === 0;
    pending.push(
      call
        ? log.append('forge.called', {
            name: `tool_${i % 20}`,
            persona: i % 3 === 0 ? 'ops' : 'agent',
            ok: i % 70 !== 0,
            ...(i % 70 === 0 ? { kind: 'timeout' } : {}),
            duration_ms: 5 + (i % 97),
            run_id: `run-${i.toString(36)}`,
            input_digest: `sha256:${'ab'.repeat(32)}`,
          })
        : log.append('hook.decided', { stage: 'pre', verdict: 'allow', ms: 1, name: `tool_${i % 20}`, at: now - (ENTRIES - i) * 10 }),
    );
    if (pending.length >= 512) await Promise.all(pending.splice(0));
  }
  await Promise.all(pending);
  await log.close();
  console.log(
    `wrote ${ENTRIES.toLocaleString()} entries (${CALLS.toLocaleString()} calls) in ${((performance.now() - t) / 1000).toFixed(1)} s`,
  );

  const env = { ...process.env, FORGE_HOME: home, NO_COLOR: '1' };
  for (const k of Object.keys(env)) if (k.startsWith('FORGE_') && k !== 'FORGE_HOME') delete env[k];
  t = performance.now();
  child = spawn(process.execPath, [CLI, 'console', '--json', '--as', 'bench'], { cwd: project, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const url = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const nl = out.indexOf('\n');
      if (nl >= 0) resolve(JSON.parse(out.slice(0, nl)).url);
    });
    child.once('exit', (code) => reject(new Error(`forge console exited ${code}: ${err}`)));
  });
  console.log(`forge console ready over the log in ${(performance.now() - t).toFixed(0)} ms (index of every entry built)`);
  const origin = new URL(url).origin;

  browser = await chromium.launch({ executablePath: chromiumPath });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  await page.goto(url);

  const PAGES = [
    ['shell (baseline)', '#/none', 'header nav'],
    ['overview', '#/overview', '[data-testid=checks]'],
    ['tools', '#/tools', '[data-testid=tools]'],
    ['runs', '#/runs', '[data-testid=runs] tbody tr'],
    ['audit (entries)', '#/audit', '[data-testid=entries] tbody tr'],
    ['approvals', '#/approvals', 'main h1'],
  ];
  const times = new Map(PAGES.map(([name]) => [name, []]));
  for (let r = 0; r < RUNS + 1; r++) {
    for (const [name, hash, ready] of r % 2 ? PAGES : [...PAGES].reverse()) {
      await page.goto('about:blank');
      const s = performance.now();
      await page.goto(`${origin}/${hash}`);
      await page.locator(ready).first().waitFor({ timeout: 120_000 });
      if (r > 0) times.get(name).push(performance.now() - s);
    }
  }
  const base = stats(times.get('shell (baseline)'));
  console.log(`\nfirst paint, ${RUNS} cold loads each (target ≤ 300 ms), against the page shell alone:`);
  for (const [name] of PAGES) {
    const st = stats(times.get(name));
    console.log(
      `  ${name.padEnd(18)} p50 ${st.p50.toFixed(0).padStart(5)} ms  p95 ${st.p95.toFixed(0).padStart(5)} ms  ${(st.p50 / base.p50).toFixed(2)}× shell`,
    );
  }

  // Verification in the page (it verifies on load; "Verify again" for the timed runs), and the reference in Node.
  await page.goto(`${origin}/#/audit`);
  await page.locator('[data-testid=verdict][data-ok=true]').waitFor({ timeout: 300_000 });
  if (process.env.BENCH_PROFILE) {
    // A CPU profile of one verification in the page (Chrome DevTools' format), for reading where it goes.
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Profiler.enable');
    await cdp.send('Profiler.setSamplingInterval', { interval: 100 });
    await cdp.send('Profiler.start');
    await page.getByTestId('verify').click();
    await page.locator('[data-testid=verdict][data-ok=true]').waitFor({ timeout: 300_000 });
    const { profile } = await cdp.send('Profiler.stop');
    writeFileSync(process.env.BENCH_PROFILE, JSON.stringify(profile));
    console.log(`\nprofile of one verification in the page: ${process.env.BENCH_PROFILE}`);
  }
  const inPage = [];
  for (let r = 0; r < 5; r++) {
    await page.getByTestId('verify').click();
    const v = page.locator('[data-testid=verdict][data-ok=true]');
    await v.waitFor({ timeout: 300_000 });
    inPage.push(Number(await v.getAttribute('data-ms')));
  }
  const node = [];
  for (let r = 0; r < 5; r++) {
    const s = performance.now();
    const res = await verifyLog(logPath);
    if (!res.ok) throw new Error('the bench log does not verify');
    node.push(performance.now() - s);
  }
  const pageMs = stats(inPage).p50;
  const nodeMs = stats(node).p50;
  console.log(`\nverification of ${ENTRIES.toLocaleString()} entries (target ≥ 100,000 entries/s in the page):`);
  console.log(
    `  in the page (WebCrypto)      ${pageMs.toFixed(0)} ms  ${Math.round((ENTRIES / pageMs) * 1000).toLocaleString()} entries/s`,
  );
  console.log(
    `  forge-audit verify (Node)    ${nodeMs.toFixed(0)} ms  ${Math.round((ENTRIES / nodeMs) * 1000).toLocaleString()} entries/s`,
  );
  console.log(`  ratio page / Node            ${(nodeMs / pageMs).toFixed(2)}× the reference's rate`);

  // Idle: the audit page open (its live tail connected), nothing appended, for 10 s.
  const ticks = () => {
    const f = readFileSync(`/proc/${child.pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return Number(f[11]) + Number(f[12]);
  };
  const hz = 100;
  const c0 = ticks();
  const w0 = performance.now();
  await new Promise((r) => setTimeout(r, 10_000));
  const cpu = ((ticks() - c0) / hz / ((performance.now() - w0) / 1000)) * 100;
  const rss = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))[1]) / 1024;
  console.log(
    `\nidle, a page following the log: ${cpu.toFixed(2)}% of a core, RSS ${rss.toFixed(0)} MiB (${ENTRIES.toLocaleString()} entries indexed)`,
  );

  // The console's cost on forge serve: the same server (stdio, its input held open) with and
  // without --console, idle for 10 s each (the console with a page following the log).
  const serveIdle = async (args) => {
    const p = spawn(process.execPath, [CLI, 'serve', ...args], { cwd: project, env, stdio: ['pipe', 'pipe', 'pipe'] });
    let text = '';
    p.stderr.on('data', (d) => (text += d));
    await new Promise((resolve, reject) => {
      const check = setInterval(() => {
        if (/MCP on stdio/.test(text)) {
          clearInterval(check);
          resolve();
        }
      }, 50);
      p.once('exit', (code) => reject(new Error(`forge serve exited ${code}: ${text}`)));
    });
    let page2;
    const u = /open (http:\/\/\S+)/.exec(text)?.[1];
    if (u) {
      page2 = await context.newPage();
      await page2.goto(u);
      await page2.goto(`${new URL(u).origin}/#/audit`);
      await page2.locator('[data-testid=verdict][data-ok=true]').waitFor({ timeout: 300_000 });
    }
    const tick = () => {
      const f = readFileSync(`/proc/${p.pid}/stat`, 'utf8').split(') ')[1].split(' ');
      return Number(f[11]) + Number(f[12]);
    };
    const a = tick();
    const w = performance.now();
    await new Promise((r) => setTimeout(r, 10_000));
    const pct = ((tick() - a) / hz / ((performance.now() - w) / 1000)) * 100;
    const mib = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${p.pid}/status`, 'utf8'))[1]) / 1024;
    await page2?.close();
    const gone = new Promise((r) => p.once('exit', r));
    p.stdin.end();
    await gone;
    return { pct, mib };
  };
  const bare = await serveIdle([]);
  const withConsole = await serveIdle(['--console', '0', '--as', 'bench']);
  console.log(`forge serve idle: ${bare.pct.toFixed(2)}% of a core, RSS ${bare.mib.toFixed(0)} MiB`);
  console.log(
    `forge serve --console idle (a page following the log): ${withConsole.pct.toFixed(2)}% of a core, RSS ${withConsole.mib.toFixed(0)} MiB (+${(withConsole.mib - bare.mib).toFixed(0)} MiB: the console and its index of ${ENTRIES.toLocaleString()} entries)`,
  );
} finally {
  await browser?.close();
  if (child && child.exitCode === null) {
    const gone = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await gone;
  }
  rmSync(root, { recursive: true, force: true });
}
