import { mkdirSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { type GatewayDocument, type GatewayLevel, type GatewayServerEntry, parseGatewayDocument } from './configDocument.js';
import { writeDurably } from './durable.js';

export type AddServersResult =
  | { ok: true; file: string; added: string[] }
  | { ok: false; kind: 'server_exists' | 'validation_failed' | 'write_failed'; message: string };

/**
 * Adds server entries to a gateway.json (creating it, and its directory with mode 0700, when
 * absent). Refuses — writing nothing — when the file is not a valid gateway.json, when a name is
 * already declared in it or in `otherFile` (the other level's gateway.json: a project entry may
 * not share a user entry's name, and the reverse would break the project's file), or when the
 * result would not validate at `level`. The file is replaced atomically (a 0600 temp file in the
 * same directory, fsync, rename, fsync of the directory); its formatting is rewritten.
 */
export function addGatewayServers(options: {
  file: string;
  level: GatewayLevel;
  servers: Readonly<Record<string, GatewayServerEntry>>;
  otherFile?: string;
}): AddServersResult {
  const { file, level } = options;
  const existing = readDoc(file, level);
  if (!existing.ok) return existing;
  const doc: GatewayDocument = existing.doc;
  const names = new Map(Object.keys(doc.servers ?? {}).map((n) => [n.toLowerCase(), file]));
  if (options.otherFile) {
    const other = readDoc(options.otherFile, level === 'user' ? 'project' : 'user');
    if (other.ok) for (const n of Object.keys(other.doc.servers ?? {})) names.set(n.toLowerCase(), options.otherFile);
  }
  const clash = Object.keys(options.servers).filter((n) => names.has(n.toLowerCase()));
  if (clash.length > 0)
    return {
      ok: false,
      kind: 'server_exists',
      message: clash
        .map((n) => `server "${n}" is already declared in ${names.get(n.toLowerCase())}`)
        .join('; ')
        .concat(': nothing was written. Remove or rename the existing entry first, or import under another name'),
    };
  const next: GatewayDocument = { ...doc, servers: { ...doc.servers, ...options.servers } };
  const text = `${JSON.stringify(next, null, 2)}\n`;
  const check = parseGatewayDocument(text, file, level);
  if (!check.ok) return { ok: false, kind: 'validation_failed', message: `${check.problem.message} (nothing was written)` };
  try {
    const dir = dirname(file);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    writeDurably(dir, file, text);
  } catch (err) {
    return {
      ok: false,
      kind: 'write_failed',
      message: `cannot write ${file} (${(err as NodeJS.ErrnoException).code ?? String(err)}); check the directory's permissions and free space`,
    };
  }
  return { ok: true, file, added: Object.keys(options.servers) };
}

function readDoc(
  file: string,
  level: GatewayLevel,
): { ok: true; doc: GatewayDocument } | { ok: false; kind: 'validation_failed'; message: string } {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { ok: true, doc: { servers: {} } };
    return {
      ok: false,
      kind: 'validation_failed',
      message: `${file} cannot be read (${(err as NodeJS.ErrnoException).code}); fix its permissions`,
    };
  }
  const r = parseGatewayDocument(text, file, level);
  if (!r.ok)
    return { ok: false, kind: 'validation_failed', message: `${r.problem.message}; fix it before adding servers (nothing was written)` };
  return { ok: true, doc: r.value.document };
}
