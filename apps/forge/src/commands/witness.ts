import { createPrivateKey, generateKeyPairSync } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, statSync, writeSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { EnvironmentError, UsageError } from '../args.js';
import type { Command } from '../command.js';
import { followStop } from '../signals.js';

/**
 * `forge witness`: a witness (C2SP tlog-witness) over HTTP, with a home and key of its own. It
 * cosigns a log's checkpoint only when it is consistent with the last it cosigned for that log,
 * and refuses rollbacks and forks with the reason (audit-chain's openWitness does the deciding).
 */
export const witnessServe: Command = {
  words: 'witness',
  usage: 'forge witness --home DIR --name NAME --log ORIGIN=VKEY [--log …] [--listen HOST:PORT]',
  summary: 'run a transparency-log witness (C2SP tlog-witness): cosigns checkpoints only when consistent with the last it cosigned',
  details: [
    '--home DIR        the witness’s own directory: its key (witness.key, made at first start, 0600) and what it cosigned per log',
    '--name NAME       its key name, a schema-less URL (witness.example/w1)',
    '--log ORIGIN=VKEY a log it witnesses: the checkpoint origin and the verifier key that signs it (forge-audit vkey)',
    '--listen H:P      where to listen (default 127.0.0.1:0, an ephemeral port); the endpoint is POST /add-checkpoint',
    'It prints its URL and its cosigner verifier key (give that to the logs and to whoever verifies).',
  ],
  options: { home: { type: 'string' }, name: { type: 'string' }, log: { type: 'string', multiple: true }, listen: { type: 'string' } },
  async run({ values }, { out }) {
    const home = values.home as string | undefined;
    const name = values.name as string | undefined;
    if (!home || !name) throw new UsageError('give --home DIR and --name NAME', this.usage);
    const specs = (values.log as string[] | undefined) ?? [];
    if (specs.length === 0)
      throw new UsageError('give at least one --log ORIGIN=VKEY: a witness cosigns only for logs it knows', this.usage);
    const chain = await import('@forge/audit-chain');
    const logs = new Map<string, string[]>();
    for (const spec of specs) {
      const eq = spec.lastIndexOf('=');
      // The verifier key's base64 may end in "=": the origin ends at the first "=" followed by a key name.
      const at = spec.search(/=[^=+\s]+\+[0-9a-f]{8}\+/);
      const cut = at >= 0 ? at : eq;
      const origin = spec.slice(0, cut);
      const vkey = spec.slice(cut + 1);
      const parsed = chain.parseVerifierKey(vkey);
      if (!origin || typeof parsed === 'string')
        throw new UsageError(
          `--log ${spec}: not ORIGIN=VKEY (${typeof parsed === 'string' ? `the key ${parsed}` : 'no origin'})`,
          this.usage,
        );
      logs.set(origin, [...(logs.get(origin) ?? []), vkey]);
    }
    const [host, portText] = ((values.listen as string | undefined) ?? '127.0.0.1:0').split(/:(?=[0-9]+$)/);
    const port = Number(portText ?? '0');
    if (!host || !Number.isInteger(port) || port < 0 || port > 65535)
      throw new UsageError(`--listen ${values.listen}: give HOST:PORT`, this.usage);
    const dir = resolve(home);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const keyFile = join(dir, 'witness.key');
    if (!existsSync(keyFile)) {
      const pem = generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
      const fd = openSync(keyFile, 'wx', 0o600);
      try {
        writeSync(fd, pem);
      } finally {
        closeSync(fd);
      }
    }
    if ((statSync(keyFile).mode & 0o077) !== 0)
      throw new EnvironmentError(
        `${keyFile} can be read by others: chmod 600 ${keyFile} (a witness key is what its cosignatures are worth)`,
      );
    const witness = await chain.openWitness({
      name,
      privateKey: createPrivateKey(readFileSync(keyFile, 'utf8')),
      logs: [...logs].map(([origin, vkeys]) => ({ origin, vkeys })),
      dir: join(dir, 'logs'),
    });
    const server = createServer(chain.witnessHttpHandler(witness));
    await new Promise<void>((ok, fail) => {
      server.once('error', (err: NodeJS.ErrnoException) =>
        fail(new EnvironmentError(`cannot listen on ${host}:${port}: ${err.code ?? err.message}`)),
      );
      server.listen(port, host, ok);
    });
    const addr = server.address() as AddressInfo;
    const url = `http://${addr.family === 'IPv6' ? `[${addr.address}]` : addr.address}:${addr.port}`;
    if (out.json) out.jsonLine({ url, name, vkey: witness.vkey, logs: [...logs.keys()] });
    else {
      out.line(`witness ${name} listening on ${url} (POST /add-checkpoint)`);
      out.line(`its verifier key: ${witness.vkey}`);
    }
    const { signal, dispose } = followStop(out.gone);
    await new Promise<void>((r) => signal.addEventListener('abort', () => r(), { once: true }));
    dispose();
    await new Promise<void>((r) => server.close(() => r()));
    return 0;
  },
};
