import { createHash } from 'node:crypto';
import { statSync } from 'node:fs';
import { pointerToken, readFileAtMost } from '@forge/policy';
import stringify from 'fast-json-stable-stringify';
import {
  type GatewayDocument,
  type GatewayLevel,
  type GatewayProblem,
  type GatewayServerEntry,
  type ParsedGatewayDocument,
  parseGatewayDocument,
} from './configDocument.js';
import type { GatewayConfig, ServerConfig } from './types.js';

/** Bytes of one gateway.json (real ones are a few kilobytes); a larger file is refused unread. */
export const GATEWAY_FILE_LIMIT = 1024 * 1024;

/** One parsed gateway.json and which file and level it came from. */
export interface GatewaySourceDocument {
  file: string;
  level: GatewayLevel;
  parsed: ParsedGatewayDocument;
}

export type MergeResult = { ok: true; config: GatewayConfig } | { ok: false; problem: GatewayProblem };

/**
 * Merges the user's and the project's gateway.json into the servers in force. Project servers
 * add to the user's; a project entry with the name of a user entry (regardless of case) is refused
 * naming both files: a repository must not redefine a server its operator declared. Disabled
 * entries (`"enabled": false`) are left out, but still reserve their name. Defaults are filled
 * (`args: []`, `env: {}`, `secrets: {}`, `binds: []` with mode `ro`, `network: false`,
 * `unsandboxed: false`, `limits: {}`).
 */
export function mergeGatewayDocuments(docs: readonly GatewaySourceDocument[]): MergeResult {
  const taken = new Map<string, { name: string; file: string }>();
  const servers = new Map<string, ServerConfig>();
  for (const d of docs) {
    for (const [name, entry] of Object.entries(d.parsed.document.servers ?? {})) {
      const other = taken.get(name.toLowerCase());
      if (other) {
        const pointer = `/servers/${pointerToken(name)}`;
        const where = d.parsed.at(pointer);
        const reason = `server "${name}" is already declared in ${other.file}${other.name !== name ? ` (as "${other.name}")` : ''}; a project's gateway.json may add servers but not redefine the operator's: rename it here, or remove one of the two`;
        return {
          ok: false,
          problem: {
            file: d.file,
            ...where,
            pointer,
            server: name,
            reason,
            message: `${where ? `${d.file}:${where.line}:${where.column}` : d.file}: ${reason}`,
          },
        };
      }
      taken.set(name.toLowerCase(), { name, file: d.file });
      if (entry.enabled === false) continue;
      servers.set(name, serverConfig(name, entry, d.level, d.file));
    }
  }
  const sorted = new Map([...servers].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  return { ok: true, config: { servers: sorted, digest: configDigest(sorted) } };
}

/** The `ServerConfig` of one validated entry, defaults filled. */
export function serverConfig(name: string, e: GatewayServerEntry, from: GatewayLevel, file: string): ServerConfig {
  const network: ServerConfig['network'] = e.network
    ? {
        allow_domains: [...e.network.allow_domains],
        deny_domains: [...(e.network.deny_domains ?? [])],
        allow_ports: [...(e.network.allow_ports ?? [])],
        private_networks: e.network.private_networks ?? false,
      }
    : false;
  return {
    name,
    transport: e.url !== undefined ? 'http' : 'stdio',
    ...(e.command !== undefined ? { command: e.command } : {}),
    args: [...(e.args ?? [])],
    ...(e.cwd !== undefined ? { cwd: e.cwd } : {}),
    env: { ...e.env },
    ...(e.url !== undefined ? { url: e.url } : {}),
    secrets: { ...e.secrets },
    binds: (e.binds ?? []).map((b) => ({ path: b.path, mode: b.mode ?? 'ro' })),
    network,
    ...(e.tools !== undefined ? { tools: [...e.tools] } : {}),
    unsandboxed: e.unsandboxed ?? false,
    ...(e.timeout_ms !== undefined ? { timeout_ms: e.timeout_ms } : {}),
    limits: { ...e.limits },
    from,
    file,
  };
}

function configDigest(servers: ReadonlyMap<string, ServerConfig>): string {
  return `sha256:${createHash('sha256')
    .update(stringify([...servers.values()]))
    .digest('hex')}`;
}

export interface GatewayConfigOptions {
  /** The operator's gateway.json (`$FORGE_HOME/gateway.json`, ForgePaths.userGateway); optional file. */
  userFile?: string;
  /** The project's (`<project>/.forge/gateway.json`, ForgePaths.workspaceGateway); optional file. */
  workspaceFile?: string;
  /** Receives `gateway.reloaded` and `gateway.reload_failed` (the runner audits them). */
  onEvent?: (event: GatewayConfigEvent) => void;
}

export type GatewayConfigEvent =
  | {
      type: 'gateway.reloaded';
      digest: string;
      /** The configured (enabled) server names. */
      servers: string[];
      /** The files read this time. */
      files: string[];
      /** True for the first load. */
      initial: boolean;
    }
  | ({
      type: 'gateway.reload_failed';
      /** What stays in force: the last good configuration, or nothing (no server is served). */
      kept: 'last_good' | 'nothing';
    } & GatewayProblem);

export type GatewayConfigState = { ok: true; config: GatewayConfig } | { ok: false; kind: 'validation_failed'; message: string };

/** The hot-reloaded gateway configuration: see {@link createGatewayConfig}. */
export interface GatewayConfigSource {
  /**
   * The configuration in force now. Stats both files (inode, size, mtime, ctime) and rereads what
   * changed; call it at each call boundary and decide the whole call from the returned config.
   */
  current(): GatewayConfigState;
}

interface FileState {
  file: string;
  level: GatewayLevel;
  stamp: string | undefined;
  text: string | undefined;
  good: ParsedGatewayDocument | undefined;
  /** Never good since it appeared: nothing from it can be used. */
  invalid: boolean;
  /** The problem last reported, so a reread of the same bad text is not a new failure. */
  reported?: string;
}

/**
 * Loads the gateway configuration (user ← project) and keeps it current. Missing files mean no
 * servers. A file that becomes malformed, or a merge that fails, keeps the last good
 * configuration in force and emits `gateway.reload_failed` naming the file, line, column, server
 * and field; a good change emits `gateway.reloaded` with the new digest. When no good
 * configuration was ever read, {@link GatewayConfigSource.current} says why (`validation_failed`):
 * fail closed, no server is served.
 */
export function createGatewayConfig(options: GatewayConfigOptions = {}): GatewayConfigSource {
  const emit = options.onEvent ?? (() => {});
  const files: FileState[] = [];
  if (options.userFile)
    files.push({ file: options.userFile, level: 'user', stamp: undefined, text: undefined, good: undefined, invalid: false });
  if (options.workspaceFile)
    files.push({ file: options.workspaceFile, level: 'project', stamp: undefined, text: undefined, good: undefined, invalid: false });
  let state: GatewayConfigState | undefined;
  let lastGood: GatewayConfig | undefined;
  let mergeReported: string | undefined;

  const report = (f: FileState | undefined, problem: GatewayProblem) => {
    emit({ type: 'gateway.reload_failed', ...problem, kept: lastGood ? 'last_good' : 'nothing' });
    if (f) f.reported = problem.message;
  };

  /** Rereads `f` when its identity changed: true when what it contributes changed. */
  const refresh = (f: FileState): boolean => {
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(f.file, { bigint: true, throwIfNoEntry: false });
    } catch (err) {
      return bad(f, `cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)}); fix its permissions`, `err:${String(err)}`);
    }
    if (!st) {
      if (f.stamp === 'absent') return false;
      const had = f.good !== undefined || f.invalid;
      Object.assign(f, { stamp: 'absent', text: undefined, good: undefined, invalid: false });
      delete f.reported;
      return had || state === undefined;
    }
    const stamp = `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
    if (stamp === f.stamp) return false;
    if (!st.isFile()) return bad(f, 'is not a regular file; remove it or put a gateway.json there', stamp);
    if (st.size > BigInt(GATEWAY_FILE_LIMIT))
      return bad(
        f,
        `is ${st.size} bytes, over the limit of ${GATEWAY_FILE_LIMIT} for a gateway.json; check that this is the right file`,
        stamp,
      );
    let text: string;
    try {
      text = readFileAtMost(f.file, GATEWAY_FILE_LIMIT + 1).toString('utf8');
    } catch (err) {
      return bad(f, `cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)}); fix its permissions`, undefined);
    }
    // A change within the stamp's clock tick could keep size and times ("racily clean"): while the
    // change is younger than a second, keep comparing the text at every call.
    const racy = BigInt(Date.now()) * 1_000_000n - st.ctimeNs < 1_000_000_000n;
    f.stamp = racy ? undefined : stamp;
    if (text === f.text) return false;
    f.text = text;
    const r = parseGatewayDocument(text, f.file, f.level);
    if (!r.ok) {
      if (f.good === undefined) f.invalid = true;
      if (f.reported !== r.problem.message) report(f, r.problem);
      return f.invalid;
    }
    f.good = r.value;
    f.invalid = false;
    delete f.reported;
    return true;
  };

  const bad = (f: FileState, reason: string, stamp: string | undefined): boolean => {
    f.stamp = stamp;
    f.text = undefined;
    if (f.good === undefined) f.invalid = true;
    const problem: GatewayProblem = { file: f.file, reason, message: `${f.file}: ${reason}` };
    if (f.reported !== problem.message) report(f, problem);
    return f.invalid;
  };

  const rebuild = (initial: boolean) => {
    const invalid = files.find((f) => f.invalid);
    if (invalid) {
      state = {
        ok: false,
        kind: 'validation_failed',
        message: `no gateway configuration is in force, so no upstream server is served: ${invalid.reported ?? invalid.file}. Fix the file; it is reread at the next call`,
      };
      return;
    }
    const docs = files.flatMap((f) => (f.good ? [{ file: f.file, level: f.level, parsed: f.good }] : []));
    const merged = mergeGatewayDocuments(docs);
    if (!merged.ok) {
      if (mergeReported !== merged.problem.message) {
        mergeReported = merged.problem.message;
        report(undefined, merged.problem);
      }
      state = lastGood
        ? { ok: true, config: lastGood }
        : { ok: false, kind: 'validation_failed', message: `no gateway configuration is in force: ${merged.problem.message}` };
      return;
    }
    mergeReported = undefined;
    const changed = lastGood?.digest !== merged.config.digest;
    lastGood = merged.config;
    state = { ok: true, config: merged.config };
    if (initial || changed)
      emit({
        type: 'gateway.reloaded',
        digest: merged.config.digest,
        servers: [...merged.config.servers.keys()],
        files: docs.map((d) => d.file),
        initial,
      });
  };

  return {
    current() {
      let changed = false;
      for (const f of files) if (refresh(f)) changed = true;
      if (state === undefined) rebuild(true);
      else if (changed) rebuild(false);
      return state as GatewayConfigState;
    },
  };
}

export type { GatewayDocument, GatewayLevel, GatewayProblem, GatewayServerEntry };
