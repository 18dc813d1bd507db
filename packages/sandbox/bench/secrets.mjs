#!/usr/bin/env node
// Secrets by placeholder: what the substituting proxy adds to an HTTPS request, against the plain
// CONNECT tunnel in the same run. One sandboxed Python client keeps one connection to each of two
// names of the same HTTPS server (a separate process): `api.test`, whose placeholder secret makes
// the proxy intercept it, and `plain.test`, tunnelled. It times each request over the kept
// connection (after the first), alternating the two. Also: the first request of each in a run
// (TLS set up, the run's leaf minted; after a first run, as a server's runs are), and what the
// run's CA costs a run (a run with a placeholder secret against one without, paired).
// Target: ≤ 3 ms added per request on loopback after the first.
// Prints figures; never asserts.
//
//   node bench/secrets.mjs     (BENCH_RUNS=400 requests a name, BENCH_PAIRS=20 runs)

import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { probe, resolveRuntimes, runSandboxed } from '../dist/index.js';

const REQUESTS = Number(process.env.BENCH_RUNS ?? 400);
const PAIRS = Number(process.env.BENCH_PAIRS ?? 20);
const host = await probe();
if (!host.ok) {
  console.error(`cannot benchmark: ${host.problems.map((p) => `${p.message} (fix: ${p.fix})`).join('; ')}`);
  process.exit(2);
}
const python = (await resolveRuntimes()).get('python3');
const dir = mkdtempSync(join(tmpdir(), 'forge-secrets-bench-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));

// The real host's certificate, for both names; the proxy trusts it, and so does the client for
// the tunnelled name only (as a host with a public certificate would be).
const [key, cert] = [join(dir, 'key.pem'), join(dir, 'cert.pem')];
execFileSync(
  'openssl',
  ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-out', cert, '-days', '1'].concat([
    '-subj',
    '/CN=bench',
    '-addext',
    'subjectAltName=DNS:api.test,DNS:plain.test',
  ]),
  { stdio: 'ignore' },
);
const serverCode = `
const https = require('node:https');
const opts = { key: require('node:fs').readFileSync(${JSON.stringify(key)}), cert: require('node:fs').readFileSync(${JSON.stringify(cert)}) };
https.createServer(opts, (req, res) => res.end('{"ok":true}')).listen(0, '127.0.0.1', function () { process.stdout.write(this.address().port + '\\n'); });
`;
const server = spawn(process.execPath, ['-e', serverCode], { stdio: ['ignore', 'pipe', 'inherit'] });
process.on('exit', () => server.kill());
const [portLine] = await once(server.stdout, 'data');
const port = Number(String(portLine).trim());

const client = `
import http.client, json, os, ssl, sys, time
n, port = int(sys.argv[1]), int(sys.argv[2])
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
ctx.load_verify_locations("/forge/host-ca.pem")
conns, first, times = {}, {}, {"api.test": [], "plain.test": []}
for name in times:
    t = time.perf_counter()
    c = http.client.HTTPSConnection("127.0.0.1", 3128, context=ctx)
    c.set_tunnel(name, port)
    c.request("GET", "/", headers={"Authorization": "Bearer " + os.environ["API_KEY"]} if name == "api.test" else {})
    c.getresponse().read()
    first[name] = (time.perf_counter() - t) * 1000
    conns[name] = c
for i in range(n):
    for name in (("api.test", "plain.test") if i % 2 == 0 else ("plain.test", "api.test")):
        c = conns[name]
        t = time.perf_counter()
        c.request("GET", "/", headers={"Authorization": "Bearer " + os.environ["API_KEY"]} if name == "api.test" else {})
        c.getresponse().read()
        times[name].append((time.perf_counter() - t) * 1000)
print(json.dumps({"first": first, "times": times}))
`;
const placeholder = 'forge-placeholder-00112233445566778899aabbccddeeff';
const network = (withSecret) => ({
  grant: { network: 'allow', loopback: 'allow', allow_domains: ['api.test', 'plain.test'] },
  resolver: async () => ['127.0.0.1'],
  ...(withSecret
    ? {
        placeholders: [
          {
            name: 'API_KEY',
            placeholder,
            value: 'sk-bench-value-0123456789',
            hosts: ['api.test'],
            headers: ['authorization'],
            format: 'Bearer {}',
          },
        ],
        upstreamCa: [readFileSync(cert, 'utf8')],
      }
    : {}),
});
const clientRun = (n) =>
  runSandboxed({
    command: [python.interpreter, '-I', '-c', client, String(n), String(port)],
    mounts: [...python.mounts.map((source) => ({ source, mode: 'ro' })), { source: cert, target: '/forge/host-ca.pem', mode: 'ro' }],
    env: { API_KEY: placeholder },
    network: network(true),
    limits: { timeoutMs: 600_000, cpuSeconds: 600 },
  });
// A first run warms what this process keeps across runs (Node's root store, the host's TLS context).
await clientRun(2);
const r = await clientRun(REQUESTS);
if (r.exitCode !== 0) {
  console.error(`the client failed: ${r.stderrTail}`);
  process.exit(1);
}
const { first, times } = JSON.parse(r.stdout.toString());
const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: s[Math.floor(s.length / 2)], p95: s[Math.floor(s.length * 0.95)] };
};
const diffs = times['api.test'].map((x, i) => x - times['plain.test'][i]);
const ms = (x) => `${x.toFixed(2)} ms`;
const api = stats(times['api.test']);
const plain = stats(times['plain.test']);
const added = stats(diffs).p50;
console.log(`@forge/sandbox secrets benchmark — node ${process.version}, ${availableParallelism()} cores, ${REQUESTS} requests a name\n`);
console.log(`  HTTPS request, plain CONNECT tunnel        p50 ${ms(plain.p50)}  p95 ${ms(plain.p95)}`);
console.log(
  `  HTTPS request, placeholder substituted     p50 ${ms(api.p50)}  p95 ${ms(api.p95)}  (${(api.p50 / plain.p50).toFixed(2)}× the tunnel)`,
);
console.log(`${added <= 3 ? ' ' : '!'} added per request (median of pair differences) ${ms(added)}  (target ≤ 3 ms)`);
console.log(
  `  first request: tunnel ${ms(first['plain.test'])}, substituted ${ms(first['api.test'])} (the run's leaf minted, two TLS handshakes)`,
);

// What the run's CA costs a run: the same run with a placeholder secret and without, paired.
const run = (withSecret) => {
  const t = performance.now();
  return runSandboxed({ command: ['/bin/true'], network: network(withSecret) }).then(() => performance.now() - t);
};
const pairs = [];
for (let i = 0; i < PAIRS; i++) {
  const [a, b] = i % 2 === 0 ? [await run(true), await run(false)] : [await run(false), await run(true)].reverse();
  pairs.push(a - b);
}
console.log(
  `  a run with a placeholder secret, against one without: ${ms(stats(pairs).p50)} more (median of ${PAIRS} pairs: the CA minted, the trust store written and bound)`,
);
process.exit(0);
