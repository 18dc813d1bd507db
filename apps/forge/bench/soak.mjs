#!/usr/bin/env node
// Soak, compressed: one real `forge serve --http` (dist/cli.js, a scratch home and project) driven
// for --minutes (default 10) by the MCP SDK client over Streamable HTTP, many more operations a
// minute than a person makes: C sessions (default 8) each calling in a loop (a cached python tool,
// an uncached one, a bash tool that writes an artifact and a log event, a bash tool whose input or
// output fails validation now and then, unknown tools, forge_call), plus a client at most every 2 s
// that opens a session, calls, and leaves without DELETE (every third while a call is in flight), a new version
// of a tool forged every 15 s, and tools/list and forge_list every 5 s.
// Every 10 s a row: calls and calls/s in the window, p50/p99 latency, outcomes by kind, what
// differed from the expected outcome, the server's RSS (alone and with its children: sandboxes,
// prebuilt shells) and open descriptors. Rows go to a TSV file as they come (default
// bench/results/soak-<time>.tsv here), the summary after them as `#` lines. After the load every
// session is ended and the server left idle past its session idle time, so a leak shows as RSS and
// descriptors that do not come back. Then `forge audit verify`, and the log's forge.called entries
// against the calls the client saw answered (they must be equal).
// Baseline, in the same run: the uncached python tool's script under raw bwrap + python3
// (bench/baseline.mjs), paired with the forge call before the load, and every 2 s during it.
// The tools are in soak-tools.mjs, the /proc figures in footprint.mjs, heap snapshots in heap.mjs.
// Prints figures; never asserts (exit 0 unless it could not run). Run `pnpm build` first.
//
//   pnpm --filter forge soak                      (10 minutes, 8 sessions)
//   node bench/soak.mjs --minutes 1 --sessions 4 --out /tmp/soak.tsv
//   (or SOAK_MINUTES, SOAK_SESSIONS, SOAK_OUT; --idle-ms: the server's --session-idle-ms, default 30000;
//   --heap DIR: heap snapshots of the server before the load and after the idle wait, and what grew)
// Ctrl-C once ends the load early and still verifies and summarises; twice exits at once. The temp
// root (home, project) is removed in every case.

import { execFile, spawn } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import { probe, resolveRuntimes } from '@forge/sandbox';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { paired, rawPython } from '../../../bench/baseline.mjs';
import { descriptorKinds, footprint } from './footprint.mjs';
import { heapFlags, heapGrowth, heapSummary, takeHeapSnapshot } from './heap.mjs';
import { checkOutcome, ECHO_PY, TOOLS, wire } from './soak-tools.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const CLI = join(here, '../dist/cli.js');
const { values: flags } = parseArgs({
  options: {
    minutes: { type: 'string' },
    sessions: { type: 'string' },
    out: { type: 'string' },
    'idle-ms': { type: 'string' },
    'sample-s': { type: 'string' },
    heap: { type: 'string' },
  },
});
const HEAP_DIR = flags.heap === undefined ? undefined : resolve(flags.heap);
const MINUTES = Number(flags.minutes ?? process.env.SOAK_MINUTES ?? 10);
const SESSIONS = Number(flags.sessions ?? process.env.SOAK_SESSIONS ?? 8);
const IDLE_MS = Number(flags['idle-ms'] ?? 30_000);
const SAMPLE_S = Number(flags['sample-s'] ?? 10);
const stamp = new Date().toISOString().slice(0, 16).replace(':', '');
const OUT = resolve(flags.out ?? process.env.SOAK_OUT ?? join(here, 'results', `soak-${stamp}.tsv`));
for (const [name, v] of [
  ['--minutes', MINUTES],
  ['--sessions', SESSIONS],
  ['--idle-ms', IDLE_MS],
  ['--sample-s', SAMPLE_S],
])
  if (!(v > 0)) {
    console.error(`soak: ${name} must be a positive number (got ${v})`);
    process.exit(2);
  }
if (!existsSync(CLI)) {
  console.error(`cannot soak: ${CLI} is missing — run \`pnpm build\` at the repository root first`);
  process.exit(2);
}
const host = await probe();
if (!host.ok) {
  console.error(`cannot soak: ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')}`);
  process.exit(2);
}
const python = (await resolveRuntimes()).get('python3');

// ---------------------------------------------------------------- the run's lifetime
const root = mkdtempSync(join(tmpdir(), 'forge-soak-'));
const home = join(root, 'home');
const project = join(root, 'project');
let server;
process.on('exit', () => {
  if (server && server.exitCode === null && server.signalCode === null) server.kill('SIGKILL');
  rmSync(root, { recursive: true, force: true, maxRetries: 5 });
});
let stopAsked = false;
for (const sig of ['SIGINT', 'SIGTERM'])
  process.on(sig, () => {
    if (stopAsked) process.exit(130);
    stopAsked = true;
    console.error(`\n${sig}: ending the load now (the summary covers what ran); again to exit at once`);
  });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

mkdirSync(home, { recursive: true, mode: 0o700 });
mkdirSync(join(project, '.forge'), { recursive: true });
// The breakers would stop a load like this one (60 calls a minute per tool by default).
writeFileSync(
  join(home, 'policy.json'),
  JSON.stringify({ breakers: { per_tool_rpm: 1e9, per_session_forge_count: 1e9, failure_threshold: 1e9 } }),
);
const env = {
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('FORGE_'))),
  FORGE_HOME: home,
  NO_COLOR: '1',
};

const echoScript = join(root, 'echo.py');
writeFileSync(echoScript, ECHO_PY);

// ---------------------------------------------------------------- figures
const pct = (xs, p) => {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const f1 = (x) => (Number.isFinite(x) ? x.toFixed(1) : '-');
const inc = (m, k, n = 1) => m.set(k, (m.get(k) ?? 0) + n);
const listOf = (m) =>
  [...m]
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k}:${v}`)
    .join(',') || '-';

const newWindow = () => ({
  lat: [],
  echo: [],
  raw: [],
  lists: [],
  hits: 0,
  kinds: new Map(),
  unexpected: new Map(),
  opened: 0,
  left: 0,
  abandoned: 0,
  forges: 0,
});
// The current row's window and the whole run's, kept alike.
let win = newWindow();
const total = { ...newWindow(), acked: new Map() };
const both = (f) => {
  f(win);
  f(total);
};
const count = (field) => both((w) => w[field]++);
const unexpected = (what) => both((w) => inc(w.unexpected, what));

/** Records one answered (or failed) tools/call: `tool` the forge name, `expect` the outcome it should have. */
function tally(tool, ms, kind, expect, cache) {
  both((w) => {
    w.lat.push(ms);
    if (tool === 'soak.echo') w.echo.push(ms);
    if (cache === 'hit') w.hits++;
    if (kind !== 'ok') inc(w.kinds, kind);
  });
  if (kind !== expect) unexpected(`${tool}:${kind}`);
}

// ---------------------------------------------------------------- the server
const stderrLines = [];
if (HEAP_DIR) mkdirSync(HEAP_DIR, { recursive: true });
const nodeFlags = HEAP_DIR ? heapFlags(HEAP_DIR) : [];
server = spawn(process.execPath, [...nodeFlags, CLI, 'serve', '--http', '127.0.0.1:0', '--json', '--session-idle-ms', String(IDLE_MS)], {
  cwd: project,
  env,
  stdio: ['ignore', 'pipe', 'pipe'],
});
server.stderr.setEncoding('utf8');
server.stderr.on('data', (d) => stderrLines.push(...d.split('\n').filter(Boolean)));
const serverExit = new Promise((r) => server.on('exit', (code, signal) => r({ code, signal })));
const url = await new Promise((ok, fail) => {
  let buf = '';
  server.stdout.setEncoding('utf8');
  server.stdout.on('data', (d) => {
    buf += d;
    const nl = buf.indexOf('\n');
    if (nl >= 0) ok(JSON.parse(buf.slice(0, nl)).url);
  });
  serverExit.then(({ code, signal }) =>
    fail(new Error(`forge serve exited (${code ?? signal}) before printing its URL: ${stderrLines.slice(-5).join(' | ')}`)),
  );
});

/** A session of the SDK client (the 2025 era: initialize, an Mcp-Session-Id, a GET stream). */
async function openSession(label) {
  const client = new Client({ name: `soak-${label}`, version: '1' });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  // Errors of its background GET stream; counted while the session is meant to be open.
  const s = { client, transport, open: true };
  client.onerror = (err) => {
    if (s.open) unexpected(`transport:${err.message.slice(0, 60)}`);
  };
  await client.connect(transport);
  return s;
}
/** Ends a session as a well-behaved client does (DELETE), or as one that leaves (connection dropped, nothing sent). */
async function closeSession(s, { leave = false } = {}) {
  s.open = false;
  if (!leave) await s.transport.terminateSession().catch(() => {});
  await s.client.close().catch(() => {});
}

/** One tools/call through `s`, timed and tallied against its expected outcome. */
async function call(s, tool, args, expect = 'ok', { via } = {}) {
  const t = performance.now();
  try {
    const r =
      via === 'forge_call'
        ? await s.client.callTool({ name: 'forge_call', arguments: { name: tool, input: args } })
        : await s.client.callTool({ name: tool.startsWith('soak.') ? wire(tool) : tool, arguments: args });
    const ms = performance.now() - t;
    let envelope;
    try {
      envelope = JSON.parse(r.content?.[0]?.text ?? 'null');
    } catch {
      envelope = null;
    }
    let kind = r.isError ? String(envelope?.error?.kind ?? 'unparsed_error') : 'ok';
    if (kind === 'ok' && tool === 'soak.report' && !r.content.some((c) => c.type === 'resource_link')) kind = 'no_resource_link';
    inc(total.acked, tool);
    tally(tool, ms, kind, expect, envelope?.meta?.cache);
  } catch (err) {
    tally(tool, performance.now() - t, `protocol:${err.code ?? err.name}`, expect);
  }
}

// A fixed-seed generator (mulberry32) per loop: the same mix in every run.
function rng(seed) {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** One call of the mix: 40% cached fib, 17% uncached echo, 5% echo via forge_call, 12% report, 23% check, 3% unknown tool. */
function oneOf(s, random, i) {
  const r = random();
  if (r < 0.4) return call(s, 'soak.fib', { n: Math.floor(random() * 300) });
  if (r < 0.57) return call(s, 'soak.echo', { i, s: 'x'.repeat(i % 64) });
  if (r < 0.62) return call(s, 'soak.echo', { i }, 'ok', { via: 'forge_call' });
  if (r < 0.74) return call(s, 'soak.report', { n: i });
  if (r < 0.97) {
    const n = Math.floor(random() * 1_000_000);
    if (random() < 0.25) return call(s, 'soak.check', [{ n: -n - 1 }, { n: String(n) }, { m: n }][n % 3], 'validation_failed');
    return call(s, 'soak.check', { n }, checkOutcome(n));
  }
  return call(s, `soak__missing_${i % 5}`, {}, 'unknown_tool');
}

// ---------------------------------------------------------------- setup and the paired baseline
const admin = await openSession('admin');
for (const spec of Object.values(TOOLS)) {
  const r = await admin.client.callTool({ name: 'forge_tool', arguments: spec });
  if (r.isError) throw new Error(`forging ${spec.name} failed: ${r.content?.[0]?.text}`);
}
const listed = (await admin.client.listTools()).tools.map((t) => t.name);
for (const spec of Object.values(TOOLS))
  if (!listed.includes(wire(spec.name))) throw new Error(`${wire(spec.name)} is not in tools/list: ${listed.join(', ')}`);

const echoInput = { i: 1, s: 'baseline' };
let baselineCalls = 0;
const forgeEcho = async () => {
  const r = await admin.client.callTool({ name: wire('soak.echo'), arguments: echoInput });
  if (r.isError) throw new Error(`soak.echo failed: ${r.content?.[0]?.text}`);
  baselineCalls++;
};
const rawEcho = () => rawPython(host, python, echoScript, echoInput);
await paired(forgeEcho, rawEcho, 5); // warm-up: interpreters probed, sandboxes built ahead
const idlePair = await paired(forgeEcho, rawEcho, 30);
// After calls ran: the sandboxes built ahead and their launchers are there, as after the load.
const before = { ...footprint(server.pid), fdKinds: descriptorKinds(server.pid) };
const heapBefore = HEAP_DIR ? await takeHeapSnapshot(server.pid, HEAP_DIR) : undefined;

const load0 = loadavg();
const header = [
  `# forge serve soak — ${new Date().toISOString()}, commit ${await git('rev-parse', '--short', 'HEAD')}${(await git('status', '--porcelain', '--untracked-files=no')) ? ' (work tree modified)' : ''}`,
  `# node ${process.version}, ${availableParallelism()} cores, load ${load0.map((l) => l.toFixed(1)).join(' ')} at the start (other work on this machine shares the CPU), bwrap ${host.bwrap.version}`,
  `# ${MINUTES} min, ${SESSIONS} sessions calling in a loop, a client that leaves at most every 2 s, a forge every 15 s, lists every 5 s; --session-idle-ms ${IDLE_MS}; a row every ${SAMPLE_S} s${HEAP_DIR ? '; heap snapshots (writing one raises RSS)' : ''}`,
  `# before the load (after ${baselineCalls} baseline calls): RSS ${f1(before.rss)} MiB (with its ${before.children} children ${f1(before.treeRss)} MiB), ${before.fds} fds; soak.echo p50 ${f1(idlePair.ours.p50)} ms vs raw bwrap+python3 ${f1(idlePair.base.p50)} ms (${(idlePair.ours.p50 / idlePair.base.p50).toFixed(2)}x, paired, 30 each)`,
];
const COLUMNS = [
  ...'t_s calls calls_per_s p50_ms p99_ms echo_p50_ms raw_p50_ms hits unexpected outcomes'.split(' '),
  ...'opened left abandoned forges list_p50_ms rss_mib tree_rss_mib children fds load1'.split(' '),
];
mkdirSync(dirname(OUT), { recursive: true });
writeFileSync(OUT, `${header.join('\n')}\n${COLUMNS.join('\t')}\n`);
for (const l of header) console.log(l.slice(2));
console.log(`  rows in ${OUT}\n`);
console.log(COLUMNS.join('\t'));

async function git(...args) {
  try {
    return (await promisify(execFile)('git', args, { cwd: here })).stdout.trim();
  } catch {
    return '?';
  }
}

// ---------------------------------------------------------------- the load
const t0 = performance.now();
const deadline = t0 + MINUTES * 60_000;
const going = () => !stopAsked && performance.now() < deadline && server.exitCode === null;
const samples = [];

/** What failed outside a tools/call (opening a session, listing, forging, the raw baseline): counted, and the loop goes on. */
const noted = (what) => (err) => {
  unexpected(`${what}:${String(err?.message ?? err).slice(0, 60)}`);
  return undefined;
};

async function worker(k) {
  const random = rng(1000 + k);
  let s;
  while (!s && going()) s = (await openSession(`worker-${k}`).catch(noted('open'))) ?? (await sleep(1000));
  if (!s) return;
  count('opened');
  for (let i = 0; going(); i++) await oneOf(s, random, i);
  await closeSession(s);
}

/** A client at most every 2 s (one after the other) that opens a session, calls once to three times and leaves without DELETE; every third leaves mid-call. */
async function leavers() {
  const random = rng(7);
  for (let k = 0; going(); k++) {
    const next = performance.now() + 2000;
    const s = await openSession(`leaver-${k}`).catch(noted('open'));
    if (!s) {
      await sleep(next - performance.now());
      continue;
    }
    count('opened');
    const n = 1 + Math.floor(random() * 3);
    for (let i = 0; i < n; i++) await oneOf(s, random, k * 3 + i);
    if (k % 3 === 2) {
      // Answered or not, the call is audited; it is counted apart from the acknowledged ones.
      void s.client.callTool({ name: wire('soak.slow'), arguments: { k } }).catch(() => {});
      await sleep(150);
      count('abandoned');
    }
    await closeSession(s, { leave: true });
    count('left');
    await sleep(next - performance.now());
  }
}

/** A new version of fib or report every 15 s (fib's cache starts over); tools/list and forge_list every 5 s. */
async function adminLoop() {
  for (let k = 1; going(); k++) {
    await sleep(5000);
    if (!going()) break;
    const t = performance.now();
    if (await admin.client.listTools().catch(noted('tools/list'))) {
      const ms = performance.now() - t;
      both((w) => w.lists.push(ms));
    }
    const fl = await admin.client.callTool({ name: 'forge_list', arguments: {} }).catch(noted('forge_list'));
    if (fl?.isError) unexpected('forge_list:error');
    if (k % 3 === 0) {
      // A comment line makes a new digest, so a new version (python and bash both take #).
      const spec = k % 2 === 0 ? TOOLS.fib : TOOLS.report;
      const arguments_ = { ...spec, impl: `${spec.impl}# version ${k}\n`, overwrite: true };
      const r = await admin.client.callTool({ name: 'forge_tool', arguments: arguments_ }).catch(noted('forge_tool'));
      if (r?.isError) unexpected(`forge_tool:${JSON.parse(r.content[0].text).error?.kind}`);
      else if (r) count('forges');
    }
  }
}

/** The baseline under the same load: raw bwrap + python3 running the echo script every 2 s. */
async function raw() {
  while (going()) {
    const t = performance.now();
    if ((await rawEcho().then(() => true, noted('raw'))) === true) {
      const ms = performance.now() - t;
      both((w) => w.raw.push(ms));
    }
    await sleep(2000);
  }
}

function row(tS, seconds, w, m) {
  const load = loadavg()[0];
  return {
    t_s: Math.round(tS),
    calls: w.lat.length,
    calls_per_s: f1(w.lat.length / seconds),
    p50_ms: f1(pct(w.lat, 50)),
    p99_ms: f1(pct(w.lat, 99)),
    echo_p50_ms: f1(pct(w.echo, 50)),
    raw_p50_ms: f1(pct(w.raw, 50)),
    hits: w.hits,
    unexpected: [...w.unexpected.values()].reduce((a, b) => a + b, 0),
    outcomes: listOf(w.kinds),
    opened: w.opened,
    left: w.left,
    abandoned: w.abandoned,
    forges: w.forges,
    list_p50_ms: f1(pct(w.lists, 50)),
    rss_mib: f1(m.rss),
    tree_rss_mib: f1(m.treeRss),
    children: m.children,
    fds: m.fds,
    load1: load.toFixed(1),
  };
}
function emit(r) {
  const line = COLUMNS.map((c) => r[c]).join('\t');
  appendFileSync(OUT, `${line}\n`);
  console.log(line);
}

/** A row every SAMPLE_S seconds while the load runs, and one for the calls still finishing after it. */
async function sampler(loadOver) {
  let from = t0;
  for (let n = 1, over = false; !over; n++) {
    over = await Promise.race([sleep(t0 + n * SAMPLE_S * 1000 - performance.now()).then(() => false), loadOver.then(() => true)]);
    if (server.exitCode !== null) return;
    const now = performance.now();
    const w = win;
    win = newWindow();
    const m = footprint(server.pid);
    samples.push({ ...m, w });
    emit(row((now - t0) / 1000, (now - from) / 1000, w, m));
    from = now;
  }
}

const loadOver = Promise.all([...Array.from({ length: SESSIONS }, (_, k) => worker(k)), leavers(), adminLoop(), raw()]);
await sampler(loadOver);
await loadOver;
const loadS = (performance.now() - t0) / 1000;

// ---------------------------------------------------------------- after the load
// Every session ended (the leavers' ones idle out), the server idle: what is left is what stays.
await closeSession(admin);
const settleMs = Math.ceil(IDLE_MS * 1.25) + 5000;
console.log(
  stopAsked
    ? '\n(stopped: no idle wait, so "idle after" still holds the sessions that left)'
    : `\n(load over after ${loadS.toFixed(0)} s; the server idles ${(settleMs / 1000).toFixed(0)} s so left sessions time out)`,
);
for (let t = 0; t < settleMs && server.exitCode === null && !stopAsked; t += 1000) await sleep(1000);
const after = server.exitCode === null ? { ...footprint(server.pid), fdKinds: descriptorKinds(server.pid) } : undefined;
const heapAfter = HEAP_DIR && after ? await takeHeapSnapshot(server.pid, HEAP_DIR) : undefined;
server.kill('SIGTERM');
const exit = await serverExit;

const verify = await new Promise((done) =>
  execFile(process.execPath, [CLI, 'audit', 'verify', '--json'], { cwd: project, env }, (err, stdout, stderr) =>
    done({ code: err ? err.code : 0, text: (stdout || stderr).trim() }),
  ),
);
/** The log's entries of each type, and forge.called by tool name, over every segment. */
function readLog() {
  const dir = join(home, 'audit');
  const types = new Map();
  const called = new Map();
  for (const f of readdirSync(dir).filter((f) => /^forge\.log(\.\d+)?$/.test(f))) {
    for (const line of readFileSync(join(dir, f), 'utf8').split('\n')) {
      if (!line) continue;
      const e = JSON.parse(line);
      inc(types, e.type);
      if (e.type === 'forge.called') inc(called, e.data.name);
    }
  }
  return { types, called };
}
const log = readLog();
function du(p) {
  const st = statSync(p);
  if (!st.isDirectory()) return st.size;
  return readdirSync(p).reduce((s, n) => s + du(join(p, n)), 0);
}

// ---------------------------------------------------------------- summary
const first = samples[0];
const last = samples.at(-1);
const sum = (m) => [...m.values()].reduce((a, b) => a + b, 0);
const answered = sum(total.acked);
const entries = sum(log.called);
const abandonedEntries = log.called.get('soak.slow') ?? 0;
const mismatch = entries - abandonedEntries - answered - baselineCalls;
const verdict = (() => {
  try {
    const v = JSON.parse(verify.text);
    return `${v.ok ? 'ok' : 'FAILED'} (${v.entries ?? '?'} entries${v.ok ? '' : `, ${JSON.stringify(v.first_bad ?? v).slice(0, 200)}`})`;
  } catch {
    return `exit ${verify.code}: ${verify.text.slice(0, 200)}`;
  }
})();
const echoP50 = pct(total.echo, 50);
const rawP50 = pct(total.raw, 50);
const warnings = stderrLines.filter((l) => !/MCP over Streamable HTTP|shutting down/.test(l));
const summary = [
  `summary after ${loadS.toFixed(0)} s of load (${samples.length} rows):`,
  `  calls answered ${sum(total.acked)} (${(sum(total.acked) / loadS).toFixed(1)}/s), p50 ${f1(pct(total.lat, 50))} ms, p99 ${f1(pct(total.lat, 99))} ms; cache hits ${total.hits}`,
  `  outcomes other than ok: ${listOf(total.kinds)}`,
  `  unexpected (outcome ≠ expected, protocol or transport errors): ${sum(total.unexpected)}${total.unexpected.size ? ` — ${listOf(total.unexpected)}` : ''}`,
  `  sessions opened ${total.opened}, left without DELETE ${total.left} (${total.abandoned} of them mid-call), tools forged anew ${total.forges}, tools/list p50 ${f1(pct(total.lists, 50))} ms`,
  `  soak.echo under load p50 ${f1(echoP50)} ms vs raw bwrap+python3 run one at a time beside the load ${f1(rawP50)} ms: ${(echoP50 / rawP50).toFixed(2)}x (forge's includes waiting behind the other calls in flight; before the load, paired one at a time: ${(idlePair.ours.p50 / idlePair.base.p50).toFixed(2)}x)`,
  `  RSS MiB: before ${f1(before.rss)}, first row ${f1(first?.rss)}, last row ${f1(last?.rss)}, max ${f1(Math.max(...samples.map((s) => s.rss)))}, idle after ${f1(after?.rss)}; with children max ${f1(Math.max(...samples.map((s) => s.treeRss)))}`,
  `  fds: before ${before.fds}, first row ${first?.fds}, last row ${last?.fds}, max ${Math.max(...samples.map((s) => s.fds))}, idle after ${after?.fds ?? '-'}`,
  `    before: ${listOf(before.fdKinds)}; ${before.children} descendants, ${before.direct} children`,
  `    idle after: ${after ? `${listOf(after.fdKinds)}; ${after.children} descendants, ${after.direct} children` : '-'}`,
  `  forge serve exit ${exit.code ?? exit.signal} on SIGTERM; ${warnings.length} other stderr lines${warnings.length ? `, first: ${warnings[0].slice(0, 200)}` : ''}`,
  `  forge audit verify: ${verdict}`,
  `  forge.called entries ${entries} = ${answered} answered + ${baselineCalls} baseline + ${abandonedEntries} for the ${total.abandoned} abandoned: ${mismatch === 0 ? 'match' : `MISMATCH by ${mismatch}`}`,
  `  log entries by type: ${listOf(log.types)}; home on disk ${(du(home) / 2 ** 20).toFixed(0)} MiB`,
];
if (heapBefore && heapAfter) {
  const g = heapGrowth(heapSummary(heapBefore), heapSummary(heapAfter));
  const mib = (b) => (b / 2 ** 20).toFixed(1);
  summary.push(
    `  live heap (after GC): before ${mib(g.before)} MiB, idle after ${mib(g.after)} MiB (${heapBefore}, ${heapAfter})`,
    `    grew most: ${g.rows.map((r) => `${r.kind} ${r.count >= 0 ? '+' : ''}${r.count} (+${(r.bytes / 1024).toFixed(0)} KiB)`).join(', ')}`,
  );
}
if (mismatch !== 0) {
  const diff = [];
  for (const name of new Set([...log.called.keys(), ...total.acked.keys()]))
    if (name !== 'soak.slow' && (log.called.get(name) ?? 0) !== (total.acked.get(name) ?? 0) + (name === 'soak.echo' ? baselineCalls : 0))
      diff.push(`${name}: log ${log.called.get(name) ?? 0}, answered ${total.acked.get(name) ?? 0}`);
  summary.push(`  by tool: ${diff.join('; ')}`);
}
appendFileSync(OUT, `${summary.map((l) => `# ${l}`).join('\n')}\n`);
console.log(`\n${summary.join('\n')}\n  (rows and summary in ${OUT})`);
process.exit(0);
