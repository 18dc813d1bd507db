#!/usr/bin/env node
// The MCP conformance harness: forges the fixture tools in fixtures/ into a scratch FORGE_HOME
// and project, starts a real `forge serve --http` on loopback, runs each scenario of the public
// suite that applies to a tool host (applicability.json) once per protocol era it covers, and
// prints a table (also results.json and results.md).
//
// Run it through scripts/conformance.sh, which installs the suite and a Node 22 into a cache
// directory and sets FORGE_CONFORMANCE_NODE (the Node 22 binary) and FORGE_CONFORMANCE_CLI (the
// suite's dist/index.js). Verdict: exit 1 when a scenario listed in expected.json fails, or when
// the suite has a scenario applicability.json does not classify (or the reverse), so a suite
// upgrade cannot silently drop or add coverage; newly passing scenarios are printed, to be added
// to expected.json. Exit 2 when the harness cannot run (no suite, forge does not start).
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../../../..');
const FORGE_CLI = join(root, 'apps/forge/dist/cli.js');
const ERAS = ['2025-11-25', '2026-07-28'];

const { values: opts } = parseArgs({
  options: {
    all: { type: 'boolean', default: false },
    scenario: { type: 'string', multiple: true },
    era: { type: 'string', multiple: true },
    out: { type: 'string' },
    concurrency: { type: 'string', default: String(Math.min(4, availableParallelism())) },
    timeout: { type: 'string', default: '30000' },
  },
});

/** Stops with exit 2 and a message that says what to do. */
function fatal(message) {
  console.error(`conformance: ${message}`);
  process.exit(2);
}

const node22 = process.env.FORGE_CONFORMANCE_NODE;
const suiteCli = process.env.FORGE_CONFORMANCE_CLI;
if (!node22 || !suiteCli) fatal('FORGE_CONFORMANCE_NODE and FORGE_CONFORMANCE_CLI are unset: run this through bash scripts/conformance.sh');
for (const era of opts.era ?? []) if (!ERAS.includes(era)) fatal(`--era ${era}: expected one of ${ERAS.join(', ')}`);
const concurrency = Number(opts.concurrency);
const timeoutMs = Number(opts.timeout);
if (!Number.isInteger(concurrency) || concurrency < 1) fatal(`--concurrency expects a positive integer (got "${opts.concurrency}")`);
if (!Number.isInteger(timeoutMs) || timeoutMs < 1000) fatal(`--timeout expects milliseconds, at least 1000 (got "${opts.timeout}")`);
const cache = process.env.FORGE_CONFORMANCE_CACHE ?? join(tmpdir(), 'forge-conformance');
const outDir = resolve(opts.out ?? join(cache, 'results'));

const readJson = (file) => {
  try {
    return JSON.parse(readFileSync(join(here, file), 'utf8'));
  } catch (err) {
    fatal(`${join(here, file)}: ${err.message}`);
  }
};
/** { scenario: { applies: boolean, why: string, fixtures?: string[] } } */
const applicability = readJson('applicability.json').scenarios;
/** { era: [scenario, ...] }: what must pass; CI fails when one of these fails. */
const expected = readJson('expected.json').pass;

/**
 * The suite's server scenarios and the eras each covers, from `conformance list --server`
 * ("  - name [2025-06-18,2025-11-25]" or "[extension]"). Dated tags up to 2025-11-25 are the
 * stateful era, run at 2025-11-25; 2026-07-28 is the stateless one; extensions (tasks,
 * skills) attach to 2026-07-28, as the suite's requirements/2026-07-28.yaml does.
 */
function listScenarios() {
  const r = spawnSync(node22, [suiteCli, 'list', '--server'], { encoding: 'utf8' });
  if (r.status !== 0) fatal(`conformance list --server failed (exit ${r.status}): ${r.stderr || r.error?.message}`);
  const out = [];
  for (const line of r.stdout.split('\n')) {
    const m = /^\s+- (\S+) \[([^\]]*)\]$/.exec(line);
    if (!m) continue;
    const tags = m[2].split(',');
    const eras = new Set();
    for (const t of tags) {
      if (t === 'extension' || t === '2026-07-28') eras.add('2026-07-28');
      else if (/^\d{4}-\d{2}-\d{2}$/.test(t) && t <= '2025-11-25') eras.add('2025-11-25');
    }
    out.push({ name: m[1], tags, extension: tags.includes('extension'), eras: ERAS.filter((e) => eras.has(e)) });
  }
  if (out.length === 0) fatal(`conformance list --server printed no scenarios I could read:\n${r.stdout}`);
  return out;
}

/** Runs a command to completion; returns its exit code and output. */
function run(cmd, args, options = {}) {
  return new Promise((done) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...options });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    const killer = options.killAfterMs ? setTimeout(() => child.kill('SIGKILL'), options.killAfterMs) : undefined;
    child.on('error', (err) => {
      clearTimeout(killer);
      done({ code: -1, stdout, stderr: `${stderr}${err.message}` });
    });
    child.on('close', (code, signal) => {
      clearTimeout(killer);
      done({ code: code ?? -1, signal, stdout, stderr });
    });
  });
}

/** Forges every fixture into a scratch home and project, then starts `forge serve --http` there. */
async function startForge(scratch) {
  const home = join(scratch, 'home');
  const project = join(scratch, 'project');
  mkdirSync(home, { mode: 0o700 });
  mkdirSync(project, { mode: 0o700 });
  const where = ['--home', home, '--project', project];
  const env = { ...process.env, FORGE_HOME: home };
  const fixturesDir = join(here, 'fixtures');
  for (const name of readdirSync(fixturesDir).sort()) {
    const r = await run(process.execPath, [FORGE_CLI, 'tools', 'forge', join(fixturesDir, name), ...where, '--json'], { env });
    if (r.code !== 0) fatal(`forging fixture ${name} failed (exit ${r.code}): ${r.stdout}${r.stderr}`);
  }
  const log = join(outDir, 'forge-serve.log');
  const child = spawn(process.execPath, [FORGE_CLI, 'serve', '--http', '127.0.0.1:0', ...where, '--json'], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logLines = [];
  child.stderr.on('data', (d) => logLines.push(String(d)));
  const url = await new Promise((done, fail) => {
    let buf = '';
    const timer = setTimeout(() => fail(new Error('forge serve printed no URL within 30 s')), 30_000);
    child.stdout.on('data', (d) => {
      buf += d;
      const nl = buf.indexOf('\n');
      if (nl < 0) return;
      clearTimeout(timer);
      try {
        done(JSON.parse(buf.slice(0, nl)).url);
      } catch (err) {
        fail(new Error(`forge serve --json printed something that is not its JSON line: ${buf.slice(0, nl)} (${err.message})`));
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      fail(new Error(`forge serve exited (code ${code}) before it served: ${logLines.join('')}`));
    });
  }).catch((err) => {
    child.kill('SIGKILL');
    fatal(err.message);
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    }
    writeFileSync(log, logLines.join(''));
  };
  return { url, stop, tools: readdirSync(fixturesDir).length };
}

/** The checks.json the suite wrote under dir (one run, one timestamped subdirectory). */
function readChecks(dir) {
  for (const sub of readdirSync(dir, { withFileTypes: true })) {
    if (!sub.isDirectory()) continue;
    try {
      return JSON.parse(readFileSync(join(dir, sub.name, 'checks.json'), 'utf8'));
    } catch {}
  }
  return undefined;
}

/** One scenario at one era: pass when no check failed and at least one succeeded (the suite's own tier rule). */
async function runScenario(url, { scenario, era, extension }) {
  const exempt = applicability[scenario]?.exempt_checks ?? {};
  const dir = join(outDir, 'runs', `${scenario}@${era}`);
  mkdirSync(dir, { recursive: true });
  const t0 = Date.now();
  // An extension scenario is "not on the spec timeline": the suite skips it when given
  // --spec-version, and runs it at 2026-07-28 without one.
  const version = extension ? [] : ['--spec-version', era];
  const args = [suiteCli, 'server', '--url', url, '--scenario', scenario, ...version, '--timeout', String(timeoutMs), '-o', dir];
  const r = await run(node22, args, { killAfterMs: timeoutMs + 30_000 });
  writeFileSync(join(dir, 'output.txt'), `$ node ${args.join(' ')}\n${r.stdout}${r.stderr}`);
  const checks = readChecks(dir);
  // A check that applicability.json exempts (it cannot apply to forge) is counted apart.
  const mine = (checks ?? []).filter((c) => !Object.hasOwn(exempt, c.id));
  const count = (s) => mine.filter((c) => c.status === s).length;
  const passed = count('SUCCESS');
  const failed = count('FAILURE');
  const warnings = count('WARNING');
  const exempted = (checks ?? []).length - mine.length;
  // pass: no check failed and one succeeded (the suite's own tier rule); skipped: every check
  // skipped (nothing declared to test); a run with only warnings is a fail.
  let result = 'fail';
  if (!checks) result = 'error';
  else if (failed === 0 && passed > 0) result = 'pass';
  else if (failed === 0 && warnings === 0) result = 'skipped';
  const failures = mine.filter((c) => c.status === 'FAILURE').map((c) => `${c.id}: ${(c.errorMessage ?? '').slice(0, 300)}`);
  return { scenario, era, result, passed, failed, warnings, exempted, ms: Date.now() - t0, failures };
}

/** Runs jobs with at most n at once, in order of submission. */
async function pool(jobs, n, fn) {
  const results = new Array(jobs.length);
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const i = next++;
      results[i] = await fn(jobs[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(n, jobs.length) }, worker));
  return results;
}

const pad = (s, n) => String(s).padEnd(n);

async function main() {
  const t0 = Date.now();
  const suite = listScenarios();
  const names = new Set(suite.map((s) => s.name));
  const problems = [];
  for (const s of suite) if (!applicability[s.name]) problems.push(`${s.name}: in the suite but not classified in applicability.json`);
  for (const name of Object.keys(applicability)) if (!names.has(name)) problems.push(`${name}: in applicability.json but not in the suite`);
  for (const [era, list] of Object.entries(expected)) {
    if (!ERAS.includes(era)) problems.push(`expected.json: unknown era "${era}" (expected ${ERAS.join(', ')})`);
    for (const name of list) {
      const s = suite.find((x) => x.name === name);
      if (!s) problems.push(`expected.json ${era}: ${name} is not a scenario of the suite`);
      else if (!s.eras.includes(era)) problems.push(`expected.json ${era}: ${name} does not run at ${era} (its tags: ${s.tags.join(',')})`);
      else if (!applicability[name]?.applies)
        problems.push(`expected.json ${era}: ${name} is marked as not applying in applicability.json`);
    }
  }

  const wanted = new Set(opts.scenario ?? []);
  for (const name of wanted) if (!names.has(name)) fatal(`--scenario ${name}: not a scenario of the suite (conformance list --server)`);
  const jobs = [];
  for (const s of suite) {
    if (wanted.size > 0 ? !wanted.has(s.name) : !opts.all && !applicability[s.name]?.applies) continue;
    for (const era of s.eras) if (!opts.era || opts.era.includes(era)) jobs.push({ scenario: s.name, era, extension: s.extension });
  }

  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  const scratch = mkdtempSync(join(tmpdir(), 'forge-conformance-'));
  let forge;
  const cleanup = () => rmSync(scratch, { recursive: true, force: true });
  const onSignal = async (sig) => {
    await forge?.stop();
    cleanup();
    process.kill(process.pid, sig);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let results;
  try {
    forge = await startForge(scratch);
    console.log(`conformance: forge at ${forge.url} with ${forge.tools} fixture tools; ${jobs.length} runs, ${concurrency} at a time`);
    // Scenarios marked serial (timing-sensitive checks) run one at a time after the rest.
    const serial = (j) => Boolean(applicability[j.scenario]?.serial);
    const parallel = await pool(
      jobs.filter((j) => !serial(j)),
      concurrency,
      (job) => runScenario(forge.url, job),
    );
    const alone = await pool(jobs.filter(serial), 1, (job) => runScenario(forge.url, job));
    const order = new Map(jobs.map((j, i) => [`${j.scenario}@${j.era}`, i]));
    results = [...parallel, ...alone].sort((a, b) => order.get(`${a.scenario}@${a.era}`) - order.get(`${b.scenario}@${b.era}`));
  } finally {
    await forge?.stop();
    cleanup();
  }

  const w = Math.max(8, ...results.map((r) => r.scenario.length));
  console.log(`\n${pad('scenario', w)}  era         applies  result   checks ok/failed/warn (+exempt)`);
  for (const r of results) {
    const applies = applicability[r.scenario]?.applies ? 'yes' : 'no';
    console.log(
      `${pad(r.scenario, w)}  ${r.era}  ${pad(applies, 7)}  ${pad(r.result, 7)}  ${r.passed}/${r.failed}/${r.warnings}${r.exempted ? ` (+${r.exempted})` : ''}`,
    );
  }

  const byKey = new Map(results.map((r) => [`${r.scenario}@${r.era}`, r]));
  const regressions = [];
  for (const [era, list] of Object.entries(expected)) {
    for (const name of list) {
      const r = byKey.get(`${name}@${era}`);
      if (r && r.result !== 'pass') regressions.push(r);
    }
  }
  const newlyPassing = results.filter(
    (r) => r.result === 'pass' && applicability[r.scenario]?.applies && !(expected[r.era] ?? []).includes(r.scenario),
  );

  const summary = {
    suite: JSON.parse(readFileSync(join(dirname(dirname(suiteCli)), 'package.json'), 'utf8')).version,
    forge_commit: spawnSync('git', ['-C', root, 'rev-parse', 'HEAD'], { encoding: 'utf8' }).stdout.trim() || undefined,
    node: spawnSync(node22, ['--version'], { encoding: 'utf8' }).stdout.trim(),
    duration_ms: Date.now() - t0,
    results: results.map((r) => ({ ...r, applies: applicability[r.scenario]?.applies ?? null })),
    regressions: regressions.map((r) => `${r.scenario}@${r.era}`),
    newly_passing: newlyPassing.map((r) => `${r.scenario}@${r.era}`),
    problems,
  };
  writeFileSync(join(outDir, 'results.json'), `${JSON.stringify(summary, null, 2)}\n`);
  writeFileSync(join(outDir, 'results.md'), markdown(suite, byKey));

  const passing = results.filter((r) => r.result === 'pass').length;
  console.log(`\n${passing} of ${results.length} runs pass (${((Date.now() - t0) / 1000).toFixed(0)} s); results in ${outDir}`);
  if (newlyPassing.length > 0) {
    console.log('\nnewly passing (not in expected.json yet; add them so they stay passing):');
    for (const r of newlyPassing) console.log(`  + ${r.scenario} @ ${r.era}`);
  }
  for (const p of problems) console.log(`\nproblem: ${p}`);
  if (regressions.length > 0) {
    console.log('\nFAILED: these scenarios are in expected.json and did not pass:');
    for (const r of regressions) {
      console.log(
        `  - ${r.scenario} @ ${r.era}: ${r.result} (${r.passed} ok, ${r.failed} failed); output: ${join(outDir, 'runs', `${r.scenario}@${r.era}`)}`,
      );
      for (const f of r.failures) console.log(`      ${f}`);
    }
  }
  process.exitCode = regressions.length > 0 || problems.length > 0 ? 1 : 0;
}

/** The doc table: every scenario of the suite, whether it applies and why not, and what this run saw. */
function markdown(suite, byKey) {
  const lines = [
    '| scenario | era | applies | result (checks ok/failed/warn) | what it needs, or why it does not apply |',
    '|---|---|---|---|---|',
  ];
  for (const s of suite) {
    const a = applicability[s.name] ?? { applies: false, why: '(not classified)' };
    const exempt = Object.entries(a.exempt_checks ?? {}).map(([id, why]) => ` Exempt check \`${id}\`: ${why}`);
    const why = `${a.why}${exempt.join('')}`.replaceAll('|', '\\|');
    for (const era of s.eras.length ? s.eras : ['-']) {
      const r = byKey.get(`${s.name}@${era}`);
      const res = r ? `${r.result} (${r.passed}/${r.failed}/${r.warnings})` : 'not run';
      lines.push(`| \`${s.name}\` | ${era} | ${a.applies ? 'yes' : 'no'} | ${res} | ${why} |`);
    }
  }
  return `${lines.join('\n')}\n`;
}

await main();
