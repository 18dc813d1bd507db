/**
 * What a tool call gives the client: its envelope as a tool result, its events as progress and
 * log notifications while it runs, and the files it names as resource links (images also inline).
 */
import type { CallContext, Envelope, FileRef, Forge } from '@forge/runner';
import type { CallToolResult, LoggingLevel, ProgressToken, ServerContext } from '@modelcontextprotocol/server';
import type { ToolView } from './schema.js';

/** Largest image returned inline as `image` content (larger ones are links only). */
export const MAX_INLINE_IMAGE_BYTES = 1024 * 1024;
const IMAGE_TYPES = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp']);

/** A tool event as the runner hands it over: validated, bounded and redacted. */
type ToolEvent =
  | { type: 'progress'; progress: number; total?: number; message?: string }
  | { type: 'log'; level: LoggingLevel; message?: string; data?: unknown };

/**
 * The `onEvent` of one call: progress becomes `notifications/progress` when the caller sent a
 * `progressToken` (values that do not grow are dropped: the spec wants them increasing); a log
 * line becomes `notifications/message` at its level, which the SDK filters by the level the
 * client set (`logging/setLevel`, or the request's `logLevel` on the 2026 era).
 */
export function toolEvents(tool: string, token: ProgressToken | undefined, extra: ServerContext): (e: ToolEvent) => void {
  let last = Number.NEGATIVE_INFINITY;
  return (e) => {
    if (e.type === 'progress') {
      if (token === undefined || !(e.progress > last)) return;
      last = e.progress;
      const params = {
        progressToken: token,
        progress: e.progress,
        ...(e.total !== undefined ? { total: e.total } : {}),
        ...(e.message !== undefined ? { message: e.message } : {}),
      };
      void extra.mcpReq.notify({ method: 'notifications/progress', params }).catch(() => {});
      return;
    }
    const data = { tool, ...(e.message !== undefined ? { message: e.message } : {}), ...(e.data !== undefined ? { data: e.data } : {}) };
    void extra.mcpReq.log(e.level, data, `forge.${tool}`).catch(() => {});
  };
}

/** Adds a `resource_link` per file the envelope names (and the spill of a truncated stdout), and inline images up to 1 MiB. */
export async function withFiles(result: CallToolResult, envelope: Envelope, forge: Forge, ctx: CallContext): Promise<CallToolResult> {
  const meta = envelope.meta as Record<string, unknown> | undefined;
  const runId = typeof meta?.run_id === 'string' ? meta.run_id : undefined;
  if (!runId) return result;
  const files = Array.isArray(meta?.files) ? (meta.files as FileRef[]) : [];
  const links: CallToolResult['content'] = [];
  for (const f of files) {
    if (typeof f?.uri !== 'string') continue;
    links.push({ type: 'resource_link', uri: f.uri, name: f.path, mimeType: f.mime_type, size: f.size });
    if (IMAGE_TYPES.has(f.mime_type) && f.size <= MAX_INLINE_IMAGE_BYTES) {
      const read = await forge.readArtifact(runId, f.path, { ...ctx, maxBytes: MAX_INLINE_IMAGE_BYTES });
      if (read.ok && IMAGE_TYPES.has(read.mime_type))
        links.push({ type: 'image', data: read.bytes.toString('base64'), mimeType: read.mime_type });
    }
  }
  if (meta?.stdout_truncated === true && typeof meta.stdout_full_artifact === 'string')
    links.push({
      type: 'resource_link',
      uri: `forge://runs/${runId}/artifacts/full_stdout.bin`,
      name: 'full_stdout.bin',
      description: 'The whole stdout of this call (the answer was cut at the output cap)',
      mimeType: 'application/octet-stream',
    });
  if (links.length === 0) return result;
  return { ...result, content: [...result.content, ...links] };
}

/**
 * An envelope as a tool result: the envelope as JSON text, `isError: !ok`, and
 * `structuredContent` — `data` when the tool publishes an `outputSchema` (only when ok: the
 * client validates it against that schema), else the whole envelope.
 */
export function toResult(envelope: Envelope, view?: ToolView): CallToolResult {
  // An upstream tool's answer (the gateway's) keeps the upstream's own content blocks, redacted by
  // the runner, as a client calling the server directly would get them; the envelope, with forge's
  // meta, stays in structuredContent.
  const upstream = view?.record.runtime === 'mcp' && envelope.ok && !view.structuredData ? upstreamBlocks(envelope.data) : undefined;
  const result: CallToolResult = {
    content: upstream ?? [{ type: 'text', text: JSON.stringify(envelope) }],
    isError: !envelope.ok,
  };
  // The call's receipt (its audit entry and leaf hash) rides in _meta too, where a client looks
  // for what is about the call rather than its content, whatever the structured content is.
  const receipt = envelope.meta?.audit;
  if (receipt !== undefined) result._meta = { forge: { audit: receipt } };
  if (!view?.structuredData) result.structuredContent = envelope as unknown as Record<string, unknown>;
  else if (envelope.ok && envelope.data !== null && typeof envelope.data === 'object' && !Array.isArray(envelope.data))
    result.structuredContent = envelope.data as Record<string, unknown>;
  return result;
}

/** The content blocks of a gateway answer's `data` (`{ content: [...] }`), when every one is a block MCP knows; else undefined. */
function upstreamBlocks(data: unknown): CallToolResult['content'] | undefined {
  const content = (data as { content?: unknown } | null)?.content;
  if (!Array.isArray(content) || content.length === 0) return undefined;
  const str = (v: unknown) => typeof v === 'string';
  for (const b of content) {
    const block = b as Record<string, unknown> | null;
    if (block === null || typeof block !== 'object') return undefined;
    const ok =
      (block.type === 'text' && str(block.text)) ||
      ((block.type === 'image' || block.type === 'audio') && str(block.data) && str(block.mimeType)) ||
      (block.type === 'resource_link' && str(block.uri) && str(block.name)) ||
      (block.type === 'resource' && block.resource !== null && typeof block.resource === 'object');
    if (!ok) return undefined;
  }
  return content as CallToolResult['content'];
}
