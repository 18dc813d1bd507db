import { lineColumn, readJsonText } from '@forge/policy';
import { type GatewayServerEntry, parseGatewayDocument } from './configDocument.js';

/** A vault entry the operator must fill for an imported server to start. */
export interface VaultNeed {
  /** The vault name gateway.json now refers to (`<server>_<variable>`, lower case). */
  vault: string;
  server: string;
  /** What it feeds: an environment variable, or the `Authorization` header. */
  env?: string;
  header?: string;
  /** What to put in the vault (a header's value without its `Bearer ` prefix). */
  hint: string;
}

/** A server of the imported file that was not converted, and why. */
export interface ImportSkip {
  server: string;
  reason: string;
}

export type ImportResult =
  | {
      ok: true;
      /** gateway.json server entries by name, with no secret value in them. */
      servers: Record<string, GatewayServerEntry>;
      /** The vault names to fill (with `forge` not knowing, or keeping, any value). */
      vault: VaultNeed[];
      skipped: ImportSkip[];
      /** Renamed servers, dropped headers and other things the operator should know. */
      notes: string[];
    }
  | { ok: false; kind: 'validation_failed'; message: string };

/**
 * Converts an MCP client configuration the operator names — the `{"mcpServers": {name: {command,
 * args, env, url, headers}}}` shape of Claude Desktop, Claude Code and Cursor, or the
 * `{"servers": …}` of VS Code — into gateway.json server entries that hold no secret value.
 * Every environment value and the Authorization header become `secrets` references to the vault
 * name `<server>_<variable>` (lower case): no environment value is assumed harmless, since a
 * config file cannot say which are secret. Other headers cannot be declared in gateway.json and
 * are dropped (listed in `notes`). A server whose arguments or URL carry what looks like a
 * credential, whose command is a shell line, or whose transport forge does not speak (SSE) is
 * skipped with the reason. Reads no file: `text` is the file's content, `file` only names it.
 */
export function importMcpConfig(text: string, file: string): ImportResult {
  const parsed = readJsonText(text.replace(/^\uFEFF/, ''));
  if (!parsed.ok) {
    const { line, column } = lineColumn(text, parsed.offset);
    return { ok: false, kind: 'validation_failed', message: `${file}:${line}:${column}: not valid JSON: ${parsed.reason}` };
  }
  const root = parsed.value as Record<string, unknown>;
  const list = isObject(root) ? (root.mcpServers ?? root.servers) : undefined;
  if (!isObject(list))
    return {
      ok: false,
      kind: 'validation_failed',
      message: `${file}: has no "mcpServers" (or "servers") object; name an MCP client configuration such as claude_desktop_config.json, .mcp.json or .cursor/mcp.json`,
    };
  const servers: Record<string, GatewayServerEntry> = {};
  const vault: VaultNeed[] = [];
  const skipped: ImportSkip[] = [];
  const notes: string[] = [];
  const taken = new Set<string>();
  for (const [original, raw] of Object.entries(list)) {
    const name = serverName(original, taken);
    if (name !== original)
      notes.push(`server "${original}" is named "${name}" (a gateway server name is a letter, then letters, digits, _ or -, at most 32)`);
    const r = convert(name, raw);
    if ('reason' in r) {
      skipped.push({ server: original, reason: r.reason });
      continue;
    }
    // The rules gateway.json is read with, so what is written is what will load.
    const check = parseGatewayDocument(JSON.stringify({ servers: { [name]: r.entry } }), file, 'user');
    if (!check.ok) {
      skipped.push({ server: original, reason: check.problem.reason });
      continue;
    }
    taken.add(name.toLowerCase());
    servers[name] = r.entry;
    vault.push(...r.vault);
    notes.push(...r.notes);
  }
  return { ok: true, servers, vault, skipped, notes };
}

function convert(name: string, raw: unknown): { entry: GatewayServerEntry; vault: VaultNeed[]; notes: string[] } | { reason: string } {
  if (!isObject(raw)) return { reason: 'is not an object' };
  const type = typeof raw.type === 'string' ? raw.type : undefined;
  if (type === 'sse' || (typeof raw.url === 'string' && /\/sse\/?$/.test(raw.url) && type !== 'http'))
    return { reason: 'uses the SSE transport, which forge does not speak; point it at the Streamable HTTP endpoint and add it by hand' };
  const entry: GatewayServerEntry = {};
  const vault: VaultNeed[] = [];
  const notes: string[] = [];
  const ref = (key: string) =>
    `${name}_${key}`
      .toLowerCase()
      .replace(/[^a-z0-9_]/g, '_')
      .slice(0, 128);
  if (typeof raw.command === 'string') {
    let command = raw.command;
    let args = Array.isArray(raw.args) ? raw.args.filter((a): a is string => typeof a === 'string') : [];
    if (Array.isArray(raw.args) && args.length !== raw.args.length) return { reason: '"args" holds something other than strings' };
    // "npx -y pkg" as one string: split plain words; anything a shell would interpret is refused.
    if (/\s/.test(command.trim())) {
      if (/[;&|$`<>(){}'"\\*?!#]/.test(command))
        return { reason: '"command" is a shell line; write the program and its arguments separately in gateway.json by hand' };
      const words = command.trim().split(/\s+/);
      command = words[0] as string;
      args = [...words.slice(1), ...args];
    }
    entry.command = command;
    if (args.length) entry.args = args;
    if (typeof raw.cwd === 'string' && raw.cwd.startsWith('/')) entry.cwd = raw.cwd;
    if (isObject(raw.env)) {
      const secrets: Record<string, string> = {};
      for (const k of Object.keys(raw.env)) {
        if (!/^[A-Za-z_][A-Za-z0-9_]{0,127}$/.test(k)) return { reason: `environment variable name ${JSON.stringify(k)} is not valid` };
        secrets[k] = ref(k);
        vault.push({ vault: ref(k), server: name, env: k, hint: `the value the client config gave ${k}` });
      }
      if (Object.keys(secrets).length) entry.secrets = secrets;
    }
  } else if (typeof raw.url === 'string') {
    entry.url = raw.url;
    if (isObject(raw.headers)) {
      for (const [h, v] of Object.entries(raw.headers)) {
        if (h.toLowerCase() === 'authorization') {
          entry.secrets = { Authorization: ref('authorization') };
          const bearer = typeof v === 'string' && /^bearer\s/i.test(v);
          vault.push({
            vault: ref('authorization'),
            server: name,
            header: 'Authorization',
            hint: bearer
              ? 'the token of the Authorization header, without "Bearer "'
              : 'the Authorization token (forge sends "Bearer <value>"; another scheme cannot be expressed)',
          });
        } else notes.push(`server "${name}": header "${h}" was dropped (gateway.json sends only an Authorization header)`);
      }
    }
    if (isObject(raw.env)) notes.push(`server "${name}": "env" was dropped (a url server has no environment)`);
  } else return { reason: 'has neither "command" nor "url"' };
  if (raw.disabled === true) entry.enabled = false;
  return { entry, vault, notes };
}

/** A valid, unused gateway server name for `name`. */
function serverName(name: string, taken: ReadonlySet<string>): string {
  let n = name.replace(/[^A-Za-z0-9_-]/g, '_');
  if (!/^[A-Za-z]/.test(n)) n = `s_${n}`;
  n = n.slice(0, 32);
  let out = n;
  for (let i = 2; taken.has(out.toLowerCase()); i++) out = `${n.slice(0, 32 - String(i).length - 1)}_${i}`;
  return out;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}
