/**
 * SEP-2243 custom parameter headers (2026-07-28 Streamable HTTP): a tool input property marked
 * `"x-mcp-header": "Name"` is mirrored by the client into an `Mcp-Param-Name` header, which the
 * server checks against the body before the call runs (-32020, HTTP 400, on a disagreement). The
 * SDK does this only for tools of its own `McpServer`; forge's tools are its own, so it checks here.
 */

/** The schema keyword, kept in the `inputSchema` clients see (the one `x-*` keyword meant for them). */
export const X_MCP_HEADER = 'x-mcp-header';
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const TYPES = new Set(['string', 'integer', 'boolean', 'number']);
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const DECIMAL = /^-?\d+(\.\d+)?$/;

export interface HeaderDeclaration {
  path: string[];
  header: string;
  type: string;
}

/** The declarations reachable through `properties` alone (others are not mirrored by clients). */
export function headerDeclarations(schema: unknown): HeaderDeclaration[] {
  const out: HeaderDeclaration[] = [];
  const walk = (node: unknown, path: string[], depth: number) => {
    if (node === null || typeof node !== 'object' || Array.isArray(node) || depth > 32) return;
    const s = node as Record<string, unknown>;
    const name = s[X_MCP_HEADER];
    if (path.length > 0 && typeof name === 'string' && TOKEN.test(name) && typeof s.type === 'string' && TYPES.has(s.type))
      if (!out.some((d) => d.header.toLowerCase() === name.toLowerCase())) out.push({ path, header: name, type: s.type });
    const props = s.properties;
    if (props && typeof props === 'object' && !Array.isArray(props))
      for (const [k, v] of Object.entries(props)) walk(v, [...path, k], depth + 1);
  };
  walk(schema, [], 0);
  return out;
}

/** Why the `Mcp-Param-*` headers disagree with `args`, or undefined when they agree. */
export function paramHeaderProblem(
  declarations: readonly HeaderDeclaration[],
  args: unknown,
  header: (name: string) => string | undefined,
): { header: string; message: string } | undefined {
  for (const d of declarations) {
    let value: unknown = args;
    for (const k of d.path) value = value !== null && typeof value === 'object' ? (value as Record<string, unknown>)[k] : undefined;
    const body = asString(value);
    if (body === undefined) continue;
    const name = `Mcp-Param-${d.header}`;
    const raw = header(name.toLowerCase());
    if (raw === undefined)
      return { header: name, message: `the body carries ${d.path.join('.')}=${JSON.stringify(value)} but the ${name} header is absent` };
    const decoded = decode(raw);
    if (decoded === undefined) return { header: name, message: `the ${name} header carries an invalid Base64 value (=?base64?…?=)` };
    const same =
      (d.type === 'integer' || d.type === 'number') && typeof value === 'number' && DECIMAL.test(decoded)
        ? Number(decoded) === value
        : decoded === body;
    if (!same)
      return {
        header: name,
        message: `the ${name} header says ${JSON.stringify(decoded)} but the body carries ${d.path.join('.')}=${JSON.stringify(value)}`,
      };
  }
  return undefined;
}

function asString(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'number' && Number.isFinite(v) && (!Number.isInteger(v) || Number.isSafeInteger(v))) return String(v);
  return undefined;
}

function decode(v: string): string | undefined {
  if (!(v.startsWith('=?base64?') && v.endsWith('?='))) return v;
  const b64 = v.slice(9, -2);
  if (!BASE64.test(b64)) return undefined;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(Buffer.from(b64, 'base64'));
  } catch {
    return undefined;
  }
}
