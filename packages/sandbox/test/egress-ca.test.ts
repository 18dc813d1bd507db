/**
 * A run's certificate authority (egress/ca.ts): the certificates it writes are ones real TLS
 * clients accept for the hosts it was made for (Node's tls, Python's ssl, curl, OpenSSL's verify),
 * its name constraints are in place, and it certifies nothing else.
 */
import { spawnSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { connect, type TLSSocket } from 'node:tls';
import { tempDir } from '@forge/test-utils';
import { describe, expect, it, onTestFinished } from 'vitest';
import { mintRunCa, type RunCa } from '../src/egress/ca.js';
import { runCommand } from './helpers.js';

/** Fails (never skips) when `cmd` is not installed, with how to install it. */
function requireCommand(cmd: string, install: string): void {
  const r = spawnSync(cmd, ['--version'], { stdio: 'ignore' });
  if (r.error) throw new Error(`this test needs ${cmd}: ${install} (${r.error.message})`);
}

/** An HTTPS server on loopback presenting `ca`'s leaf for `host`; answers "hello <path>". */
async function serve(ca: RunCa, host: string): Promise<number> {
  const { certPem, keyPem } = ca.leaf(host);
  const server = createHttpsServer({ cert: certPem, key: keyPem }, (req, res) => res.end(`hello ${req.url}`));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  onTestFinished(() => {
    server.closeAllConnections();
    server.close();
  });
  return (server.address() as AddressInfo).port;
}

async function handshake(port: number, servername: string, ca: string): Promise<TLSSocket> {
  const socket = connect({ host: '127.0.0.1', port, servername, ca });
  socket.on('error', () => {});
  onTestFinished(() => {
    socket.destroy();
  });
  await once(socket, 'secureConnect');
  return socket;
}

describe("a run's certificate authority", () => {
  it('writes certificates Node, Python, curl and OpenSSL accept for its hosts, and names only them', async () => {
    for (const cmd of ['openssl', 'curl', 'python3']) requireCommand(cmd, `apt-get install -y ${cmd}`);
    const ca = mintRunCa(['API.Example.test.', 'localhost', '127.0.0.1', '::1'], 'forge run test');
    expect(ca.hosts).toEqual(['api.example.test', 'localhost', '127.0.0.1', '::1']);
    const dir = await tempDir();
    const caFile = join(dir, 'ca.pem');
    writeFileSync(caFile, ca.certPem);

    // What the certificates say.
    const root = new X509Certificate(ca.certPem);
    expect(root.ca).toBe(true);
    expect(root.verify(root.publicKey)).toBe(true);
    const leaf = new X509Certificate(ca.leaf('localhost').certPem);
    expect(leaf.ca).toBe(false);
    expect(leaf.verify(root.publicKey)).toBe(true);
    expect(leaf.checkIssued(root)).toBe(true);
    expect(leaf.checkHost('localhost')).toBe('localhost');
    expect(leaf.checkHost('api.example.test')).toBeUndefined();
    expect(new X509Certificate(ca.leaf('127.0.0.1').certPem).checkIP('127.0.0.1')).toBe('127.0.0.1');
    expect(ca.leaf('LOCALHOST')).toBe(ca.leaf('localhost')); // minted once per host
    const text = spawnSync('openssl', ['x509', '-noout', '-text', '-in', caFile], { encoding: 'utf8' }).stdout;
    expect(text).toMatch(
      /X509v3 Name Constraints: critical\s+Permitted:\s+DNS:api\.example\.test\s+DNS:localhost\s+IP:127\.0\.0\.1\/255\.255\.255\.255\s+IP:0:0:0:0:0:0:0:1\/(FFFF:){7}FFFF/,
    );
    expect(text).toMatch(/X509v3 Basic Constraints: critical\s+CA:TRUE, pathlen:0/);
    expect(text).toMatch(/Signature Algorithm: ecdsa-with-SHA256/);

    // OpenSSL's own verification, name constraints and host included.
    for (const [host, flag] of [
      ['api.example.test', '-verify_hostname'],
      ['localhost', '-verify_hostname'],
      ['127.0.0.1', '-verify_ip'],
      ['::1', '-verify_ip'],
    ] as const) {
      const file = join(dir, `${host.replace(/:/g, '_')}.pem`);
      writeFileSync(file, ca.leaf(host).certPem);
      const v = spawnSync('openssl', ['verify', '-CAfile', caFile, flag, host, '-purpose', 'sslserver', file], { encoding: 'utf8' });
      expect(v.status, v.stderr + v.stdout).toBe(0);
      const wrong = spawnSync('openssl', ['verify', '-CAfile', caFile, '-verify_hostname', 'other.test', file], { encoding: 'utf8' });
      expect(wrong.status).not.toBe(0);
    }

    // Real TLS clients against a real server that presents the leaf.
    const port = await serve(ca, 'localhost');
    const tls = await handshake(port, 'localhost', ca.certPem);
    expect(tls.authorized).toBe(true);
    const curl = await runCommand('curl', ['-sS', '--cacert', caFile, `https://localhost:${port}/curl`]);
    expect(curl, curl.err).toMatchObject({ code: 0, out: 'hello /curl' });
    const py = await runCommand('python3', [
      '-c',
      `import ssl, urllib.request
ctx = ssl.create_default_context(cafile=${JSON.stringify(caFile)})
print(urllib.request.urlopen("https://localhost:${port}/python", context=ctx).read().decode())`,
    ]);
    expect(py, py.err).toMatchObject({ code: 0, out: 'hello /python\n' });
    // Not trusted without the CA, and not for another name.
    const untrusted = await runCommand('curl', ['-sS', `https://localhost:${port}/`]);
    expect(untrusted.code).not.toBe(0);
    const otherName = await runCommand('curl', [
      '-sS',
      '--cacert',
      caFile,
      '--resolve',
      `api.example.test:${port}:127.0.0.1`,
      `https://api.example.test:${port}/`,
    ]);
    expect(otherName.code, 'the leaf for localhost does not serve api.example.test').not.toBe(0);
  });

  it('each CA is its own: another run’s CA does not vouch for this one’s leaves', async () => {
    const a = mintRunCa(['localhost']);
    const b = mintRunCa(['localhost']);
    expect(a.certPem).not.toBe(b.certPem);
    const port = await serve(a, 'localhost');
    const socket = connect({ host: '127.0.0.1', port, servername: 'localhost', ca: b.certPem });
    const [err] = (await once(socket, 'error')) as [NodeJS.ErrnoException];
    expect(err.code).toMatch(/UNABLE_TO_VERIFY_LEAF_SIGNATURE|CERT_SIGNATURE_FAILURE|SELF_SIGNED/);
    socket.destroy();
  });

  it('refuses hosts it was not made for, and names a certificate cannot hold', () => {
    const ca = mintRunCa(['api.example.test']);
    expect(() => ca.leaf('evil.test')).toThrow(/certifies api\.example\.test, not evil\.test/);
    expect(() => mintRunCa([])).toThrow(/at least one host/);
    expect(() => mintRunCa(['bad host'])).toThrow(/"bad host" is not a host name or IP address/);
    expect(() => mintRunCa(['a..b'])).toThrow(/not a host name/);
  });
});
