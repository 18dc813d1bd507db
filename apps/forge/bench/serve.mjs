// `forge serve` as a child speaking raw JSON-RPC lines over stdio, so the figures hold no client
// library. Shared by the benches in this directory.

import { spawn } from 'node:child_process';

/** Starts `node <cli> serve` in `cwd`; `ready` resolves (with ms since spawn) once initialize is answered. */
export function serveChild(cli, cwd, env, args = []) {
  const t0 = performance.now();
  const child = spawn(process.execPath, [cli, 'serve', ...args], { cwd, env, stdio: ['pipe', 'pipe', 'ignore'] });
  const waiting = new Map();
  let buf = '';
  child.stdout.on('data', (d) => {
    buf += d;
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      const msg = JSON.parse(buf.slice(0, i));
      buf = buf.slice(i + 1);
      waiting.get(msg.id)?.(msg);
      waiting.delete(msg.id);
    }
  });
  let id = 0;
  const request = (method, params) =>
    new Promise((resolve) => {
      const n = ++id;
      waiting.set(n, resolve);
      child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id: n, method, params })}\n`);
    });
  const ready = request('initialize', {
    protocolVersion: '2025-06-18',
    capabilities: {},
    clientInfo: { name: 'bench', version: '1' },
  }).then(() => {
    child.stdin.write('{"jsonrpc":"2.0","method":"notifications/initialized"}\n');
    return performance.now() - t0;
  });
  const stop = () =>
    new Promise((r) => {
      child.on('exit', r);
      child.stdin.end();
    });
  return { child, ready, request, stop, t0 };
}
