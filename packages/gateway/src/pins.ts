import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, statSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { DirLock } from '@forge/audit-chain';
import stringify from 'fast-json-stable-stringify';
import { writeDurably } from './durable.js';
import type { ApprovalVia, Pin, PinStatus, ToolDefinition, ToolDiff, ToolState } from './types.js';

/**
 * The pin store: `<home>/gateway/pins.json` holds, per server and upstream tool, the digest and
 * definition the operator approved. A tool is served only while its listed definition has the
 * pinned digest.
 *
 * The file is covered by the audit log. Every write appends one entry (`gateway.approved` or
 * `gateway.unpinned`) carrying `pins_digest` (sha256 of the whole new file's bytes) and
 * `pins_generation` (a counter the file carries, +1 per write). On reading, the file's digest must
 * equal the `pins_digest` of the newest of those two entries (the higher generation): a file
 * edited, replaced or restored from a copy outside forge does not match, and then no pin is
 * trusted until the operator approves again. One append per write, so a write is either wholly
 * in the log or taken back.
 */

/** Appends an audit entry (SourceHost.record): undefined when durable, else why not. */
export type RecordAudit = (type: string, data: Record<string, unknown>) => Promise<{ message: string } | undefined>;
/** The data of the newest audit entry of a type (SourceHost.lastAudited). */
export type LastAudited = (type: string) => Promise<Record<string, unknown> | undefined>;

export interface PinStoreOptions {
  /** The gateway's state directory (`ForgePaths.gatewayDir`, `<home>/gateway`); created 0700. */
  dir: string;
  /** Appends the audit entry of each write; without it, writes are refused (`audit_unavailable`). */
  record?: RecordAudit;
  /** Reads the last audited pins digest; without it the file is trusted as read (tests, tools without a log). */
  lastAudited?: LastAudited;
}

/** Why pins could not be read or written. */
export type PinFailure = {
  ok: false;
  kind: 'pins_untrusted' | 'pins_unreadable' | 'audit_unavailable' | 'not_pinned' | 'lock_timeout';
  message: string;
};

/** The trusted pins at one moment. */
export interface Pins {
  /** `sha256:` of pins.json's bytes (undefined when there is no file). */
  readonly digest: string | undefined;
  readonly generation: number;
  /** The pin of one upstream tool. */
  get(server: string, tool: string): Pin | undefined;
  /** Every pin of a server, by upstream tool name. */
  list(server: string): ReadonlyMap<string, Pin>;
  /** The servers that have pins. */
  servers(): string[];
  /** The definition digest approved for `server` as declared by `file`, if any. */
  definition(server: string, file: string): DefinitionPin | undefined;
  /**
   * How each listed tool stands (`approved`, `new`, `changed`, `not_allowed` when `allowList` is
   * given and omits it), then each pinned tool the server no longer lists (`removed`).
   */
  states(server: string, listed: readonly ToolDefinition[], allowList?: readonly string[]): ToolState[];
  /** What differs from the pins: new, changed (with the differing fields) and removed tools. */
  diff(server: string, listed: readonly ToolDefinition[]): ToolDiff[];
}

export type PinsRead = { ok: true; pins: Pins } | PinFailure;

export type PinWrite = { ok: true; tools: ToolState[]; pins_digest: string } | PinFailure;

export interface PinStore {
  /** pins.json's path. */
  readonly file: string;
  /** The pins now (the file is reread when it changed and checked against the audit log). */
  read(): Promise<PinsRead>;
  /**
   * Pins the given definitions of `server` (replacing earlier pins of those tools) and audits it
   * as `gateway.approved` {server, tools: [{tool, digest, previous?}], by, via, pins_digest,
   * pins_generation}. Serialized with every other writer (a lock file beside pins.json). When
   * pins.json is untrusted, the untrusted file is moved aside (`pins.json.untrusted-<time>`) and
   * the new file holds only these pins. If the audit entry cannot be written, the previous file is
   * restored and the approval refused (`audit_unavailable`).
   */
  approve(
    server: string,
    defs: readonly ToolDefinition[],
    by: string,
    definition?: { file: string; digest: string },
    via?: ApprovalVia,
  ): Promise<PinWrite>;
  /**
   * Drops the pins of `tools` of `server` (all its pins when `tools` is empty), audited as
   * `gateway.unpinned`. `not_pinned` when a named tool has no pin; refused on an untrusted file
   * (approve again first). Returns the removed tools as `removed` states.
   */
  unpin(server: string, tools: readonly string[], by: string, via?: ApprovalVia): Promise<PinWrite>;
}

/** The fields a pin covers, in the order `diff` reports them. */
export const PINNED_FIELDS = ['name', 'title', 'description', 'inputSchema', 'outputSchema', 'annotations'] as const;

/**
 * `sha256:` over the canonical JSON (keys sorted) of the fields a pin covers: name, title,
 * description, inputSchema, outputSchema, annotations; absent fields are omitted, other fields
 * (`_meta`, `icons`, …) ignored. Key order does not change it.
 */
export function toolDigest(def: ToolDefinition): string {
  // A listing's definitions are kept (and never changed) until the upstream is listed again: each
  // is digested once, not at every listing or call.
  const known = digestOf.get(def);
  if (known !== undefined) return known;
  const digest = `sha256:${createHash('sha256')
    .update(stringify(pinned(def)))
    .digest('hex')}`;
  digestOf.set(def, digest);
  return digest;
}
const digestOf = new WeakMap<object, string>();

function pinned(def: ToolDefinition): ToolDefinition {
  const out: Record<string, unknown> = {};
  for (const k of PINNED_FIELDS) if (def[k] !== undefined) out[k] = def[k];
  return out as unknown as ToolDefinition;
}

const FILE = 'pins.json';
const LOCK = 'pins.lock';
/** What to do about a pins.json that cannot be trusted, for its refusal. */
const APPROVE_AGAIN =
  'Approve the tools to serve again (forge gateway approve <server>, for each server): the file is then kept aside as pins.json.untrusted-<time>, and the new one holds only what is approved from then on';

interface PinsFile {
  version: 1;
  generation: number;
  servers: Record<string, Record<string, Pin>>;
  /**
   * The server definitions approved, by server name, then by the configuration file that declared
   * it (definition.ts): a pin serves only while the server's definition has the digest approved for
   * the file that declares it now.
   */
  definitions?: Record<string, Record<string, DefinitionPin>>;
}

/** One approved server definition. */
export interface DefinitionPin {
  digest: string;
  approved_at: string;
  approved_by: string;
}

/** Opens the pin store in `options.dir` (nothing is read or created until used). */
export function openPinStore(options: PinStoreOptions): PinStore {
  const dir = options.dir;
  const file = join(dir, FILE);
  let trusted: string | undefined; // a digest already checked against the log

  const lastDigest = async (): Promise<string | undefined> => {
    if (!options.lastAudited) return undefined;
    const [a, u] = await Promise.all([options.lastAudited('gateway.approved'), options.lastAudited('gateway.unpinned')]);
    const gen = (d: Record<string, unknown> | undefined) => (typeof d?.pins_generation === 'number' ? d.pins_generation : -1);
    const newest = gen(a) >= gen(u) ? a : u;
    return typeof newest?.pins_digest === 'string' ? newest.pins_digest : undefined;
  };

  /** Reads and checks the file; `locked` says the caller holds the lock (no write can be half done). */
  const load = async (locked: boolean): Promise<{ ok: true; data: PinsFile; digest: string | undefined; bytes?: Buffer } | PinFailure> => {
    let bytes: Buffer | undefined;
    try {
      bytes = readFileSync(file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
        return {
          ok: false,
          kind: 'pins_unreadable',
          message: `${file} cannot be read (${(err as NodeJS.ErrnoException).code}); fix its permissions`,
        };
    }
    const digest = bytes ? `sha256:${createHash('sha256').update(bytes).digest('hex')}` : undefined;
    if (options.lastAudited && digest !== trusted) {
      const audited = await lastDigest();
      if (audited !== digest) {
        // A writer between its rename and its audit append: under the lock the two agree again.
        if (!locked) return withLock(dir, () => load(true));
        if (digest === undefined) return { ok: true, data: empty(), digest }; // deleted: no pins, nothing to trust
        const parsed = bytes ? parsePins(bytes.toString('utf8')) : undefined;
        const damage = parsed && 'problem' in parsed ? `; ${parsed.problem}` : '';
        return {
          ok: false,
          kind: 'pins_untrusted',
          message: `${file} does not match the audit log (${audited ? `it last recorded ${audited.slice(0, 19)}…` : 'it records no pins'}, the file is ${digest.slice(0, 19)}…)${damage}: it was changed or damaged outside forge, so no pin is trusted and no gateway tool is served. ${APPROVE_AGAIN}`,
        };
      }
    }
    if (!bytes) return { ok: true, data: empty(), digest };
    const parsed = parsePins(bytes.toString('utf8'));
    if ('problem' in parsed)
      return { ok: false, kind: 'pins_untrusted', message: `${file} is not a pins file forge wrote: ${parsed.problem}. ${APPROVE_AGAIN}` };
    const data = parsed.data;
    trusted = digest;
    return { ok: true, data, digest, bytes };
  };

  const write = async (
    server: string,
    by: string,
    change: (data: PinsFile, untrusted: boolean) => { tools: ToolState[]; audit: Record<string, unknown> } | PinFailure,
    type: 'gateway.approved' | 'gateway.unpinned',
    via: ApprovalVia = 'cli',
  ): Promise<PinWrite> =>
    withLock(dir, async (): Promise<PinWrite> => {
      if (!options.record)
        return {
          ok: false,
          kind: 'audit_unavailable',
          message: 'pins are written only with an audit log to record them; open the store with record',
        };
      const cur = await load(true);
      if (!cur.ok && cur.kind !== 'pins_untrusted') return cur;
      const untrusted = !cur.ok;
      const data = cur.ok ? structuredClone(cur.data) : empty();
      const changed = change(data, untrusted);
      if ('ok' in changed) return changed;
      data.generation = (cur.ok ? cur.data.generation : 0) + 1;
      const text = `${JSON.stringify(sortedFile(data), null, 2)}\n`;
      const digest = `sha256:${createHash('sha256').update(text).digest('hex')}`;
      let aside: string | undefined;
      if (untrusted) {
        aside = `${file}.untrusted-${new Date().toISOString().replaceAll(':', '')}`;
        renameSync(file, aside);
      }
      writeDurably(dir, file, text);
      const failed = await options.record(type, {
        server,
        ...changed.audit,
        by,
        via,
        pins_digest: digest,
        pins_generation: data.generation,
        ...(aside ? { untrusted_file: aside } : {}),
      });
      if (failed) {
        // Taken back: the log does not have it, so the file must not either.
        if (aside) renameSync(aside, file);
        else if (cur.ok && cur.bytes) writeDurably(dir, file, cur.bytes);
        else unlinkSync(file);
        return {
          ok: false,
          kind: 'audit_unavailable',
          message: `the audit log could not record the change, so ${file} was left as it was: ${failed.message}`,
        };
      }
      trusted = digest;
      return { ok: true, tools: changed.tools, pins_digest: digest };
    });

  /** The last snapshot read, and the file's identity then: a read of an unchanged file parses nothing. */
  let cached: { stamp: string; pins: Pins } | undefined;
  const stampOf = (): string => {
    try {
      const st = statSync(file, { bigint: true });
      return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
    } catch (err) {
      return `missing:${(err as NodeJS.ErrnoException).code}`;
    }
  };

  return {
    file,
    async read() {
      // Any write, rename or edit of the file changes its inode, size or times (nanoseconds):
      // then it is read, hashed and checked against the log again.
      const stamp = stampOf();
      if (cached && cached.stamp === stamp && trusted !== undefined) return { ok: true, pins: cached.pins };
      const r = await load(false);
      if (!r.ok) {
        cached = undefined;
        return r;
      }
      const pins = snapshot(r.data, r.digest);
      cached = r.digest === trusted || !options.lastAudited ? { stamp, pins } : undefined;
      return { ok: true, pins };
    },
    approve(server, defs, by, definition, via) {
      return write(server, by, (data) => approveChange(data, { server, defs, by, definition }), 'gateway.approved', via);
    },
    unpin(server, tools, by, via) {
      return write(server, by, (data, untrusted) => unpinChange(data, untrusted, { file, server, tools }), 'gateway.unpinned', via);
    },
  };
}

/** What a change to the pins file did: the tools it touched and the facts the audit entry records. */
type PinChange = { tools: ToolState[]; audit: Record<string, unknown> } | PinFailure;

/** Pins `defs` of `server` (and the server's definition, when given) in `data`, approved by `by`. */
function approveChange(
  data: PinsFile,
  o: { server: string; defs: readonly ToolDefinition[]; by: string; definition: { file: string; digest: string } | undefined },
): PinChange {
  const { server, defs, by, definition } = o;
  const mine = (data.servers[server] ??= {});
  const at = new Date().toISOString();
  let previousDefinition: string | undefined;
  if (definition) {
    const byFile = ((data.definitions ??= {})[server] ??= {});
    previousDefinition = byFile[definition.file]?.digest;
    byFile[definition.file] = { digest: definition.digest, approved_at: at, approved_by: by };
  }
  const tools: ToolState[] = [];
  const audit: Record<string, unknown>[] = [];
  for (const def of defs) {
    const digest = toolDigest(def);
    const previous = mine[def.name]?.digest;
    mine[def.name] = { digest, definition: pinned(def), approved_at: at, approved_by: by };
    tools.push({
      server,
      tool: def.name,
      name: `${server}.${def.name}`,
      status: 'approved',
      digest,
      pinned: digest,
      definition: pinned(def),
    });
    audit.push({ tool: def.name, digest, ...(previous && previous !== digest ? { previous } : {}) });
  }
  return {
    tools,
    audit: {
      tools: audit,
      ...(definition
        ? {
            definition: {
              file: definition.file,
              digest: definition.digest,
              ...(previousDefinition && previousDefinition !== definition.digest ? { previous: previousDefinition } : {}),
            },
          }
        : {}),
    },
  };
}

/** Removes the pins of `tools` of `server` (all of them when empty) from `data`; refuses when the file is not trusted. */
function unpinChange(data: PinsFile, untrusted: boolean, o: { file: string; server: string; tools: readonly string[] }): PinChange {
  const { file, server, tools } = o;
  if (untrusted)
    return {
      ok: false,
      kind: 'pins_untrusted',
      message: `${file} does not match the audit log: nothing in it can be unpinned. Approve the tools you want again (forge gateway approve <server>)`,
    };
  const mine = data.servers[server] ?? {};
  const names = tools.length === 0 ? Object.keys(mine) : [...tools];
  const missing = names.filter((t) => !Object.hasOwn(mine, t));
  if (missing.length > 0 || names.length === 0)
    return {
      ok: false,
      kind: 'not_pinned',
      message:
        names.length === 0
          ? `server "${server}" has no pins`
          : `${missing.map((t) => `${server}.${t}`).join(', ')} ${missing.length > 1 ? 'are' : 'is'} not pinned (forge gateway tools ${server} shows what is)`,
    };
  const out: ToolState[] = [];
  for (const t of names) {
    const p = mine[t] as Pin;
    out.push({ server, tool: t, name: `${server}.${t}`, status: 'removed', pinned: p.digest, definition: p.definition });
    delete mine[t];
  }
  if (Object.keys(mine).length === 0) {
    delete data.servers[server];
    delete data.definitions?.[server];
  }
  return { tools: out, audit: { tools: out.map((s) => ({ tool: s.tool, digest: s.pinned })) } };
}

function empty(): PinsFile {
  return { version: 1, generation: 0, servers: {} };
}

function sortedFile(d: PinsFile): PinsFile {
  const servers: PinsFile['servers'] = {};
  for (const s of Object.keys(d.servers).sort()) {
    const tools: Record<string, Pin> = {};
    for (const t of Object.keys(d.servers[s] ?? {}).sort()) tools[t] = (d.servers[s] as Record<string, Pin>)[t] as Pin;
    servers[s] = tools;
  }
  const out: PinsFile = { version: 1, generation: d.generation, servers };
  if (d.definitions) {
    const definitions: NonNullable<PinsFile['definitions']> = {};
    for (const s of Object.keys(d.definitions).sort()) {
      const byFile: Record<string, DefinitionPin> = {};
      for (const f of Object.keys(d.definitions[s] ?? {}).sort())
        byFile[f] = (d.definitions[s] as Record<string, DefinitionPin>)[f] as DefinitionPin;
      definitions[s] = byFile;
    }
    out.definitions = definitions;
  }
  return out;
}

/**
 * The file's content if it has the shape forge writes and every pin's digest is its definition's,
 * else what is wrong with it (for the refusal: a cut file reads differently from a foreign one).
 */
function parsePins(text: string): { data: PinsFile } | { problem: string } {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    return { problem: `it is not valid JSON (cut short?): ${(err as Error).message}` };
  }
  const d = v as PinsFile;
  const wrong = (what: string) => ({ problem: `it is not a pins file: ${what}` });
  if (!isObject(d)) return wrong('not a JSON object');
  if (d.version !== 1) return wrong(`"version" is ${JSON.stringify(d.version)}, not 1`);
  if (typeof d.generation !== 'number') return wrong('"generation" is not a number');
  if (!isObject(d.servers)) return wrong('"servers" is not an object');
  for (const [server, tools] of Object.entries(d.servers)) {
    if (!isObject(tools)) return wrong(`"servers.${server}" is not an object`);
    for (const [tool, p] of Object.entries(tools)) {
      if (!isObject(p) || typeof p.digest !== 'string' || !isObject(p.definition) || toolDigest(p.definition) !== p.digest)
        return wrong(`the pin of ${server}.${tool} does not match its definition`);
    }
  }
  if (d.definitions !== undefined) {
    if (!isObject(d.definitions)) return wrong('"definitions" is not an object');
    for (const [server, byFile] of Object.entries(d.definitions)) {
      if (!isObject(byFile)) return wrong(`"definitions.${server}" is not an object`);
      for (const p of Object.values(byFile))
        if (!isObject(p) || typeof p.digest !== 'string') return wrong(`a definition pin of ${server} has no digest`);
    }
  }
  return { data: d };
}

function isObject(v: unknown): v is object {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Pins of no tool: what an approval over an untrusted pins.json starts from (it is set aside). */
export function noPins(): Pins {
  return snapshot(empty(), undefined);
}

function snapshot(data: PinsFile, digest: string | undefined): Pins {
  const list = (server: string) => new Map(Object.entries(data.servers[server] ?? {}));
  return {
    digest,
    generation: data.generation,
    get: (server, tool) => data.servers[server]?.[tool],
    list,
    servers: () => Object.keys(data.servers).sort(),
    definition: (server, file) => data.definitions?.[server]?.[file],
    states(server, listed, allowList) {
      const pins = list(server);
      const out: ToolState[] = [];
      const seen = new Set<string>();
      for (const def of listed) {
        seen.add(def.name);
        const digest = toolDigest(def);
        const pin = pins.get(def.name);
        const status: PinStatus =
          allowList && !allowList.includes(def.name) ? 'not_allowed' : !pin ? 'new' : pin.digest === digest ? 'approved' : 'changed';
        out.push({
          server,
          tool: def.name,
          name: `${server}.${def.name}`,
          status,
          digest,
          ...(pin ? { pinned: pin.digest } : {}),
          definition: def,
        });
      }
      for (const [tool, pin] of [...pins].sort(([a], [b]) => (a < b ? -1 : 1))) {
        if (!seen.has(tool))
          out.push({ server, tool, name: `${server}.${tool}`, status: 'removed', pinned: pin.digest, definition: pin.definition });
      }
      return out;
    },
    diff(server, listed) {
      const pins = list(server);
      const out: ToolDiff[] = [];
      const seen = new Set<string>();
      for (const def of listed) {
        seen.add(def.name);
        const digest = toolDigest(def);
        const pin = pins.get(def.name);
        if (!pin) out.push({ tool: def.name, status: 'new', new: { digest, definition: pinned(def) }, fields: [] });
        else if (pin.digest !== digest) {
          const now = pinned(def);
          const fields = PINNED_FIELDS.filter((k) => stringify(now[k] ?? null) !== stringify(pin.definition[k] ?? null));
          out.push({
            tool: def.name,
            status: 'changed',
            old: { digest: pin.digest, definition: pin.definition },
            new: { digest, definition: now },
            fields,
          });
        }
      }
      for (const [tool, pin] of [...pins].sort(([a], [b]) => (a < b ? -1 : 1))) {
        if (!seen.has(tool)) out.push({ tool, status: 'removed', old: { digest: pin.digest, definition: pin.definition }, fields: [] });
      }
      return out;
    },
  };
}

/**
 * Runs `fn` holding the cross-process lock of the pin store: forge's one lock design (an owner
 * record inside the lock directory, so a holder that died is taken over at once).
 */
async function withLock<T>(dir: string, fn: () => Promise<T>): Promise<T | PinFailure> {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const lock = new DirLock(join(dir, LOCK), { timeoutMs: 20_000 });
  try {
    await lock.acquire();
  } catch (err) {
    if ((err as { code?: unknown }).code === 'lock_timeout')
      return {
        ok: false,
        kind: 'lock_timeout',
        message: `${join(dir, FILE)} is being written by another process for too long: ${(err as Error).message}`,
      };
    return {
      ok: false,
      kind: 'pins_unreadable',
      message: `cannot lock ${join(dir, LOCK)} (${(err as Error).message}); check the directory's permissions`,
    };
  }
  try {
    return await fn();
  } finally {
    await lock.release().catch(() => {});
  }
}
