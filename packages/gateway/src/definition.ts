import { createHash } from 'node:crypto';
import { accessSync, closeSync, constants as fsc, fstatSync, openSync, readSync, realpathSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';
import stringify from 'fast-json-stable-stringify';
import type { ServerConfig } from './types.js';

/**
 * What an approval of a gateway server vouches for besides its tools' definitions
 * (docs/security.md, invariant 4): everything that decides what runs — the configuration file that
 * declared it and at which level, the transport, the command and its arguments, the working
 * directory, the environment (names and values), which vault secret goes to which variable, the
 * binds, the network grant, whether it runs unsandboxed, its limits, its URL — and the bytes that
 * run: the executable the command resolves to and every argument naming an existing file (the
 * script), by SHA-256. A pin is good only while this digest is the one approved; a change to any of
 * it (another project's file declaring the same name, a pull that changes the command, an edited
 * script) withholds the server's tools until an operator approves again.
 */
export interface ServerDefinition {
  /** `sha256:` over the canonical JSON of `parts`. */
  digest: string;
  /** The file that declared the server (the key of its approvals). */
  file: string;
  parts: Record<string, unknown>;
}

export function serverDefinition(server: ServerConfig): ServerDefinition {
  const files: Record<string, string> = {};
  if (server.transport === 'stdio') {
    const exe = resolveCommand(server.command ?? '');
    files[exe ?? `(not found) ${server.command ?? ''}`] = exe ? fileDigest(exe) : 'missing';
    for (const a of server.args) {
      if (!isAbsolute(a)) continue;
      const d = fileDigest(a);
      if (d !== 'missing') files[a] = d;
    }
  }
  const parts: Record<string, unknown> = {
    v: 1,
    from: server.from,
    file: server.file,
    transport: server.transport,
    command: server.command ?? null,
    args: server.args,
    cwd: server.cwd ?? null,
    env: server.env,
    secrets: server.secrets,
    url: server.url ?? null,
    binds: server.binds,
    network: server.network,
    unsandboxed: server.unsandboxed,
    limits: server.limits,
    files,
  };
  return { digest: `sha256:${createHash('sha256').update(stringify(parts)).digest('hex')}`, file: server.file, parts };
}

/** The command as the launcher finds it: a path as given (resolved), else the first executable of that name on PATH. */
function resolveCommand(name: string): string | undefined {
  if (!name) return undefined;
  const candidates = name.includes('/')
    ? [name]
    : (process.env.PATH ?? '')
        .split(':')
        .filter(Boolean)
        .map((d) => join(d, name));
  for (const c of candidates) {
    try {
      accessSync(c, fsc.X_OK);
      return realpathSync(c);
    } catch {
      // next
    }
  }
  return undefined;
}

/** Digests of files by their identity and change stamp: an unchanged file is read once per process. */
const digests = new Map<string, { stamp: string; digest: string }>();

/** `sha256:` of the regular file at `path` (links followed), or `missing` when there is none. */
export function fileDigest(path: string): string {
  let fd: number;
  try {
    fd = openSync(path, fsc.O_RDONLY);
  } catch {
    return 'missing';
  }
  try {
    const st = fstatSync(fd, { bigint: true });
    if (!st.isFile()) return 'missing';
    const stamp = `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
    const known = digests.get(path);
    if (known?.stamp === stamp) return known.digest;
    const h = createHash('sha256');
    const buf = Buffer.allocUnsafe(1 << 20);
    for (let n = readSync(fd, buf); n > 0; n = readSync(fd, buf)) h.update(buf.subarray(0, n));
    const digest = `sha256:${h.digest('hex')}`;
    digests.set(path, { stamp, digest });
    return digest;
  } finally {
    closeSync(fd);
  }
}
