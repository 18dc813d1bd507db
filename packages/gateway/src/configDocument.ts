import { closestKey, lineColumn, pointerPath, pointerToken, readJsonText, unescapeToken, valueAt } from '@forge/policy';
import type { ErrorObject, ValidateFunction } from 'ajv';
import schema from '../schema/gateway.schema.json' with { type: 'json' };
import { credentialArgProblem, credentialUrlProblem, credentialValueProblem, isCredentialName } from './credentials.js';
import generatedValidator from './gateway-validator.generated.js';

/** One server entry of gateway.json as written (see schema/gateway.schema.json). */
export interface GatewayServerEntry {
  command?: string;
  args?: string[];
  cwd?: string;
  env?: Record<string, string>;
  url?: string;
  secrets?: Record<string, string>;
  binds?: { path: string; mode?: 'ro' | 'rw' }[];
  network?: false | { allow_domains: string[]; deny_domains?: string[]; allow_ports?: number[]; private_networks?: boolean };
  tools?: string[];
  unsandboxed?: boolean;
  timeout_ms?: number;
  limits?: { memory_mb?: number; processes?: number };
  enabled?: boolean;
}

/** One gateway.json as written. */
export interface GatewayDocument {
  $schema?: string;
  servers?: Record<string, GatewayServerEntry>;
}

/** Which gateway.json: the operator's (`$FORGE_HOME/gateway.json`) or a repository's (`<project>/.forge/gateway.json`). */
export type GatewayLevel = 'user' | 'project';

/** Where and why a gateway.json was refused. `message` is the whole of it, ready to show. */
export interface GatewayProblem {
  file: string;
  line?: number;
  column?: number;
  /** JSON pointer of the offending value. */
  pointer?: string;
  /** The server entry concerned, when there is one. */
  server?: string;
  /** The field of that entry (`env.GITHUB_TOKEN`, `command`, …). */
  field?: string;
  reason: string;
  /** `file:line:column: reason`. */
  message: string;
}

/** A document that passed the schema and every rule, with where each value starts (for later problems). */
export interface ParsedGatewayDocument {
  document: GatewayDocument;
  /** Line and column of the value at a JSON pointer (`/servers/github`). */
  at(pointer: string): { line: number; column: number } | undefined;
}

export type GatewayParseResult = { ok: true; value: ParsedGatewayDocument } | { ok: false; problem: GatewayProblem };

/** The JSON Schema of gateway.json (draft 2020-12), as published in `schema/` (`@forge/gateway/gateway.schema.json`). */
export const GATEWAY_SCHEMA: Readonly<Record<string, unknown>> = schema;

// Compiled ahead of time (scripts/generate-validator.mjs): reading gateway.json loads no Ajv.
const validator = generatedValidator as unknown as ValidateFunction;

const SECRET_HELP = 'move it to the vault and name it under "secrets"';

/**
 * Parses and validates one gateway.json: JSON without duplicate keys, the schema, then the rules
 * the schema cannot say (exactly one of command and url; no secret value anywhere; argv, not a
 * shell line; `unsandboxed` only at user level; fields that only make sense for one transport).
 * A refusal names the file, line and column, the server and field, and what to do.
 */
export function parseGatewayDocument(text: string, file: string, level: GatewayLevel): GatewayParseResult {
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  const fail = (offset: number | undefined, reason: string, pointer?: string): GatewayParseResult => {
    const where = offset === undefined ? undefined : lineColumn(text, offset);
    const at = where ? `${file}:${where.line}:${where.column}` : file;
    const m = pointer ? /^\/servers\/([^/]+)(?:\/(.*))?$/.exec(pointer) : null;
    const server = m ? unescapeToken(m[1] as string) : undefined;
    const field = m?.[2] ? m[2].split('/').map(unescape).join('.') : undefined;
    return {
      ok: false,
      problem: {
        file,
        ...where,
        ...(pointer !== undefined ? { pointer } : {}),
        ...(server !== undefined ? { server } : {}),
        ...(field !== undefined ? { field } : {}),
        reason,
        message: `${at}: ${reason}`,
      },
    };
  };
  if (text.trim() === '') return fail(0, 'the file is empty; write {"servers": {}} for no servers');
  const parsed = readJsonText(text);
  if (!parsed.ok) return fail(parsed.offset, `not valid JSON: ${parsed.reason}`);
  const at = (pointer: string) => {
    const o = parsed.offsets.get(pointer);
    return o === undefined ? undefined : lineColumn(text, o);
  };
  if (!validator(parsed.value)) {
    const err = pickError(validator.errors ?? [], parsed.value);
    if (!err) return fail(0, 'does not match the gateway.json schema');
    const { pointer, reason } = describeError(err, parsed.value);
    return fail(parsed.offsets.get(pointer) ?? parsed.offsets.get(err.instancePath), reason, pointer);
  }
  const doc = parsed.value as GatewayDocument;
  const seen = new Map<string, string>();
  for (const [name, entry] of Object.entries(doc.servers ?? {})) {
    const base = `/servers/${pointerToken(name)}`;
    const other = seen.get(name.toLowerCase());
    if (other !== undefined)
      return fail(
        parsed.offsets.get(base),
        `servers "${other}" and "${name}" differ only by case; tool names compare regardless of case, so give them distinct names`,
        base,
      );
    seen.set(name.toLowerCase(), name);
    const p = serverProblem(entry, level);
    if (p) {
      const pointer = p.field ? `${base}/${p.field.split('.').map(pointerToken).join('/')}` : base;
      return fail(
        parsed.offsets.get(pointer) ?? parsed.offsets.get(base),
        `servers.${name}${p.field ? `.${p.field}` : ''}: ${p.reason}`,
        pointer,
      );
    }
  }
  return { ok: true, value: { document: doc, at } };
}

const STDIO_ONLY = ['args', 'cwd', 'env', 'binds', 'network', 'unsandboxed', 'limits'] as const;
const SHELL_CHARS = /[\s;&|$`<>(){}'"\\*?!#]/;
const LOOPBACK = new Set(['localhost', '127.0.0.1', '[::1]']);

/** The first rule `entry` breaks: the field (dotted, as written) and the reason with what to do. */
function serverProblem(e: GatewayServerEntry, level: GatewayLevel): { field?: string; reason: string } | undefined {
  if (e.command === undefined && e.url === undefined)
    return { reason: 'needs "command" (a stdio server: the program to run) or "url" (a Streamable HTTP endpoint)' };
  if (e.command !== undefined && e.url !== undefined)
    return {
      field: 'url',
      reason: 'has both "command" and "url"; a server is either a program forge runs (command) or an endpoint (url): keep one',
    };
  for (const [k, v] of Object.entries(e.secrets ?? {})) {
    if (credentialValueProblem(v))
      return {
        field: `secrets.${k}`,
        reason:
          'holds what looks like the secret itself; "secrets" maps to a vault name (e.g. "github_token"): put the value in the vault under that name',
      };
  }
  if (e.command !== undefined) {
    if (SHELL_CHARS.test(e.command)) {
      const words = e.command.trim().split(/\s+/);
      if (words.some((w) => credentialValueProblem(w) || /^[A-Za-z_]\w*=/.test(w)))
        return {
          field: 'command',
          reason: `is a shell line with what looks like a credential in it: forge runs no shell; put the program in "command", its arguments in "args", and the credential in the vault, named under "secrets"`,
        };
      const hint =
        words.length > 1 && !/[;&|$`<>(){}'"\\*?!#]/.test(e.command)
          ? ` write "command": ${JSON.stringify(words[0])}, "args": ${JSON.stringify([...words.slice(1), ...(e.args ?? [])])}`
          : ' put the program in "command" and each argument in "args"';
      return { field: 'command', reason: `is ${JSON.stringify(e.command)}: a program, not a shell line (forge runs no shell);${hint}` };
    }
    if (e.secrets && Object.hasOwn(e.secrets, 'Authorization'))
      return {
        field: 'secrets.Authorization',
        reason:
          'an Authorization secret is sent as an HTTP header, so only a "url" server takes one; for a stdio server name the environment variable it reads (e.g. "GITHUB_TOKEN": "<vault name>")',
      };
    for (const [k, v] of Object.entries(e.env ?? {})) {
      if (isCredentialName(k))
        return {
          field: `env.${k}`,
          reason: `${k} is named like a credential and a value in gateway.json is readable by whoever reads the file: ${SECRET_HELP} ("secrets": {"${k}": "<vault name>"})`,
        };
      const why = credentialValueProblem(v);
      if (why)
        return {
          field: `env.${k}`,
          reason: `the value looks like a credential (${why}): ${SECRET_HELP} ("secrets": {"${k}": "<vault name>"})`,
        };
      if (e.secrets && Object.hasOwn(e.secrets, k))
        return { field: `env.${k}`, reason: `${k} is set both in "env" and in "secrets": keep it in one` };
    }
    const arg = credentialArgProblem(e.args ?? []);
    if (arg)
      return {
        field: `args.${arg.index}`,
        reason: `looks like a credential (${arg.reason}): pass it as an environment variable instead, ${SECRET_HELP}`,
      };
    if (e.unsandboxed === true && level === 'project')
      return {
        field: 'unsandboxed',
        reason:
          "a repository's gateway.json cannot run a server outside the sandbox; only the operator's $FORGE_HOME/gateway.json can (remove the key, or declare the server there)",
      };
    for (const [i, b] of (e.binds ?? []).entries()) {
      if (b.path.split('/').some((c) => c === '..' || c === '.'))
        return { field: `binds.${i}.path`, reason: `is ${JSON.stringify(b.path)}: write the path without "." or ".." components` };
    }
    return undefined;
  }
  const url = e.url as string;
  for (const k of STDIO_ONLY) {
    if (e[k] !== undefined)
      return {
        field: k,
        reason: `only a stdio server (one with "command") takes "${k}"; forge connects to a url server directly, remove it`,
      };
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return { field: 'url', reason: `is ${JSON.stringify(url)}, not a URL; write https://host/path` };
  }
  const why = credentialUrlProblem(parsed);
  if (why) return { field: 'url', reason: `${why}: ${SECRET_HELP} ("secrets": {"Authorization": "<vault name>"})` };
  if (parsed.protocol === 'http:' && !LOOPBACK.has(parsed.hostname))
    return {
      field: 'url',
      reason: `is plain http to ${parsed.hostname}; use https (plain http is accepted only to localhost, 127.0.0.1 or [::1])`,
    };
  for (const k of Object.keys(e.secrets ?? {})) {
    if (k !== 'Authorization')
      return {
        field: `secrets.${k}`,
        reason: 'a url server takes only an "Authorization" secret (sent as "Bearer <value>"); environment variables are for stdio servers',
      };
  }
  return undefined;
}

function pickError(errors: readonly ErrorObject[], doc: unknown): ErrorObject | undefined {
  const named = errors.find((e) => e.keyword === 'propertyNames');
  if (named) return named;
  // network is `false` or an object: Ajv reports both branches of the oneOf; show the one meant.
  const first = errors[0];
  if (first && /\/network\/oneOf\//.test(first.schemaPath)) {
    const net = first.instancePath.split('/').slice(0, 4).join('/');
    const value = valueAt(doc, net);
    if (value !== null && typeof value === 'object' && !Array.isArray(value))
      return errors.find((e) => e.keyword !== 'oneOf' && !e.schemaPath.includes('/oneOf/0')) ?? first;
    return { ...first, instancePath: net, keyword: 'network', params: {} };
  }
  return first;
}

const PATTERN_HELP: Record<string, string> = {
  serverName: 'a server name: a letter, then letters, digits, _ or - (at most 32; no dots: it is the <server> part of <server>.<tool>)',
  envName: 'an environment variable name: letters, digits and _, not starting with a digit',
  secretName: 'a vault name: letters, digits and _, not starting with a digit',
  toolName: 'an upstream tool name: letters, digits, _ . - (at most 64)',
  absolutePath: 'an absolute path (starting with /)',
  domainPattern: 'a domain (example.com) or a suffix pattern (*.example.com)',
};

function describeError(e: ErrorObject, doc: unknown): { pointer: string; reason: string } {
  const pointer = e.instancePath;
  const name = pointerPath(pointer) || 'the document';
  // A refusal is shown and audited: never echo what may be a secret.
  const got = (v: unknown) =>
    typeof v === 'string' && credentialValueProblem(v)
      ? '(the value is not shown: it looks like a credential)'
      : `(got ${JSON.stringify(v)})`;
  const value = valueAt(doc, pointer);
  const def = /\$defs\/(\w+)\/[a-zA-Z]+$/.exec(e.schemaPath)?.[1];
  switch (e.keyword) {
    case 'network':
      return { pointer, reason: `${name} must be false (no network) or {"allow_domains": ["example.com", …]} ${got(value)}` };
    case 'additionalProperties': {
      const key = String(e.params.additionalProperty);
      const known = Object.keys((e.parentSchema as { properties?: object } | undefined)?.properties ?? {}).filter((k) => k !== '$schema');
      const guess = closestKey(key, known);
      return {
        pointer: `${pointer}/${pointerToken(key)}`,
        reason: `unknown key "${key}" in ${name}${guess ? ` (did you mean "${guess}"?)` : known.length ? ` (expected one of: ${known.join(', ')})` : ''}`,
      };
    }
    case 'propertyNames': {
      const key = String(e.params.propertyName);
      const d = /\$defs\/(\w+)/.exec(JSON.stringify(e.schema))?.[1] ?? '';
      return {
        pointer: `${pointer}/${pointerToken(key)}`,
        reason: `${name} has a key ${JSON.stringify(key)} that is not ${PATTERN_HELP[d] ?? 'a valid name'}`,
      };
    }
    case 'required':
      return { pointer, reason: `${name} needs "${String(e.params.missingProperty)}"` };
    case 'type':
      return { pointer, reason: `${name} must be ${article(String(e.params.type))} ${got(value)}` };
    case 'minimum':
      return { pointer, reason: `${name} must be at least ${e.params.limit} ${got(value)}` };
    case 'maximum':
      return { pointer, reason: `${name} must be at most ${e.params.limit} ${got(value)}` };
    case 'enum':
      return {
        pointer,
        reason: `${name} must be one of ${(e.params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')} ${got(value)}`,
      };
    case 'pattern':
      if (def && PATTERN_HELP[def]) return { pointer, reason: `${name} must be ${PATTERN_HELP[def]} ${got(value)}` };
      if (pointer.endsWith('/url')) return { pointer, reason: `${name} must be an https:// (or loopback http://) URL ${got(value)}` };
      return { pointer, reason: `${name} must match ${e.params.pattern} ${got(value)}` };
    case 'minLength':
      return { pointer, reason: `${name} must not be empty` };
    case 'maxLength':
      return { pointer, reason: `${name} must be at most ${e.params.limit} characters` };
    case 'maxItems':
    case 'maxProperties':
      return { pointer, reason: `${name} has more than the limit of ${e.params.limit} entries; trim it` };
    default:
      return { pointer, reason: `${name} ${e.message ?? 'is not valid'} ${got(value)}` };
  }
}

function article(type: string): string {
  return type === 'integer' || type === 'object' || type === 'array' ? `an ${type}` : `a ${type}`;
}
