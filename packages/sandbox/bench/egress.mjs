#!/usr/bin/env node
// Egress benchmark: the same client, run on the host connecting directly and in the sandbox
// going through the egress proxy, against the same loopback server (a separate process, so the
// proxy does not share its thread with the destination). Prints p50/p95 side by side with the
// ratios, and what the relay adds to a run. Not a test: figures depend on the host.
//
//   pnpm bench     (or node bench/egress.mjs; EGRESS_CONNECTIONS=200, EGRESS_MB=512 for more)

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { availableParallelism } from 'node:os';
import { probe, resolveRuntimes, runSandboxed } from '../dist/index.js';

const CONNECTIONS = Number(process.env.EGRESS_CONNECTIONS ?? 100);
const MB = Number(process.env.EGRESS_MB ?? 256);
const ROUNDS = 4;
const TRANSFERS = 3;
const RUNS = Number(process.env.BENCH_RUNS ?? 40);

const host = await probe();
if (!host.ok) {
  console.error(`cannot benchmark: ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')}`);
  process.exit(2);
}
const node = (await resolveRuntimes()).get('node');

// The destination: 'e' echoes, 'g' streams MB mebibytes then ends.
const serverCode = `
const net = require('node:net');
const chunk = Buffer.alloc(1 << 16);
const total = ${MB} << 20;
net.createServer((s) => {
  s.once('data', (d) => {
    if (d[0] === 0x65) { s.write(d.subarray(1)); s.pipe(s); return; }
    let sent = 0;
    const pump = () => { while (sent < total) { sent += chunk.length; if (!s.write(chunk)) return void s.once('drain', pump); } s.end(); };
    pump();
  });
  s.on('error', () => {});
}).listen(0, '127.0.0.1', function () { process.stdout.write(this.address().port + '\\n'); });
`;
const server = spawn(process.execPath, ['-e', serverCode], { stdio: ['ignore', 'pipe', 'inherit'] });
const [portLine] = await once(server.stdout, 'data');
const port = Number(String(portLine).trim());

// The client: connect (directly, or by CONNECT through the proxy), one echo round trip, close;
// then TRANSFERS downloads. Prints JSON: connection times (ms) and transfer rates (MB/s).
const clientCode = `
const net = require('node:net');
const [mode, port, n, transfers, mb] = process.argv.slice(1).map((x, i) => (i === 0 ? x : Number(x)));
function open() {
  return new Promise((resolve, reject) => {
    if (mode === 'direct') {
      const s = net.connect(port, '127.0.0.1', () => resolve(s));
      return s.once('error', reject);
    }
    const s = net.connect(3128, '127.0.0.1', () => s.write('CONNECT dest.test:' + port + ' HTTP/1.1\\r\\nHost: dest.test:' + port + '\\r\\n\\r\\n'));
    let head = '';
    const onData = (d) => {
      head += d.toString('latin1');
      if (!head.includes('\\r\\n\\r\\n')) return;
      s.off('data', onData);
      if (!head.startsWith('HTTP/1.1 200')) return reject(new Error(head));
      resolve(s);
    };
    s.on('data', onData);
    s.once('error', reject);
  });
}
(async () => {
  const lat = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const s = await open();
    s.write('ex');
    await new Promise((r) => s.once('data', r));
    lat.push(performance.now() - t);
    s.destroy();
  }
  const rates = [];
  for (let i = 0; i < transfers; i++) {
    const s = await open();
    let got = 0;
    const t = performance.now();
    s.on('data', (d) => { got += d.length; });
    s.write('g');
    await new Promise((r) => s.once('end', r));
    if (got !== mb * 1048576) throw new Error('short transfer: ' + got);
    rates.push((got / 1048576) / ((performance.now() - t) / 1000));
    s.destroy();
  }
  console.log(JSON.stringify({ lat, rates }));
})().catch((e) => { console.error(e); process.exit(1); });
`;

const args = (mode) => [mode, String(port), String(CONNECTIONS), String(TRANSFERS), String(MB)];
const network = {
  grant: { network: 'allow', loopback: 'allow', allow_domains: ['dest.test'] },
  resolver: async () => ['127.0.0.1'],
  maxConnections: CONNECTIONS + TRANSFERS + 10,
};

async function direct() {
  const c = spawn(process.execPath, ['-e', clientCode, ...args('direct')], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  c.stdout.on('data', (d) => (out += d));
  const [code] = await once(c, 'close');
  if (code !== 0) throw new Error(`direct client exited ${code}`);
  return JSON.parse(out);
}

async function proxied() {
  const r = await runSandboxed({
    command: [node.interpreter, '-e', clientCode, ...args('proxy')],
    mounts: node.mounts.map((source) => ({ source, mode: 'ro' })),
    network,
    limits: { timeoutMs: 300_000, cpuSeconds: 300 },
  });
  if (r.reason !== 'exit' || r.exitCode !== 0) throw new Error(`sandboxed client ended ${r.reason} ${r.exitCode}: ${r.stderrTail}`);
  return JSON.parse(r.stdout.toString());
}

function stats(xs) {
  const s = [...xs].sort((x, y) => x - y);
  return { p50: s[Math.floor(s.length / 2)], p95: s[Math.min(s.length - 1, Math.floor(s.length * 0.95))] };
}
const ms = (x) => `${x.toFixed(3)} ms`;
const mbs = (x) => `${x.toFixed(0)} MB/s`;
const mark = (ok) => (ok ? ' ' : '!');

console.log(
  `@forge/sandbox egress benchmark — node ${process.version}, ${availableParallelism()} cores, bwrap ${host.bwrap.version}; ` +
    `${ROUNDS} alternating rounds of ${CONNECTIONS} connections and ${TRANSFERS} × ${MB} MiB downloads each`,
);
console.log('  (! marks a figure that misses its target on this machine)\n');

await direct(); // warm-up: page cache, JIT of the server
await proxied();
// Alternate rounds, so both see the same machine state.
const d = { lat: [], rates: [] };
const p = { lat: [], rates: [] };
for (let round = 0; round < ROUNDS; round++) {
  for (const [into, fn] of [
    [d, direct],
    [p, proxied],
  ]) {
    const r = await fn();
    into.lat.push(...r.lat);
    into.rates.push(...r.rates);
  }
}

const dl = stats(d.lat);
const pl = stats(p.lat);
const added = pl.p50 - dl.p50;
console.log('  connect + first round trip    p50          p95');
console.log(`    direct (host loopback)      ${ms(dl.p50).padEnd(12)} ${ms(dl.p95)}`);
console.log(`    through the proxy           ${ms(pl.p50).padEnd(12)} ${ms(pl.p95)}`);
console.log(`${mark(added <= 2)}   added at p50              ${ms(added)} (target ≤ 2 ms), ratio ${(pl.p50 / dl.p50).toFixed(2)}×\n`);

const dt = stats(d.rates);
const pt = stats(p.rates);
const ratio = pt.p50 / dt.p50;
console.log(`  throughput (${MB} MiB download)  p50          p95`);
console.log(`    direct (host loopback)      ${mbs(dt.p50).padEnd(12)} ${mbs(dt.p95)}`);
console.log(`    through the proxy           ${mbs(pt.p50).padEnd(12)} ${mbs(pt.p95)}`);
console.log(`${mark(ratio >= 0.5)}   ratio at p50              ${(ratio * 100).toFixed(0)} % of direct (target ≥ 50 %)\n`);

// What a run pays for the relay: /bin/true with and without network, interleaved.
const trueRun = (withNetwork) => runSandboxed({ command: ['/bin/true'], ...(withNetwork ? { network } : {}) });
const a = [];
const b = [];
for (let i = 0; i < RUNS; i += 5) {
  for (let k = 0; k < 5; k++) {
    const t = performance.now();
    await trueRun(false);
    a.push(performance.now() - t);
  }
  for (let k = 0; k < 5; k++) {
    const t = performance.now();
    await trueRun(true);
    b.push(performance.now() - t);
  }
}
const without = stats(a);
const withNet = stats(b);
console.log('  a run of /bin/true            p50          p95');
console.log(`    without network             ${ms(without.p50).padEnd(12)} ${ms(without.p95)}`);
console.log(`    with network (relay)        ${ms(withNet.p50).padEnd(12)} ${ms(withNet.p95)}`);
console.log(`    relay start-up at p50       ${ms(withNet.p50 - without.p50)}`);

server.kill();
