/**
 * What a tool call gives the client besides its envelope: its events as progress and log
 * notifications while it runs, and the files it names as resource links (images also inline).
 */
import type { CallContext, Envelope, FileRef, Forge } from '@forge/runner';
import type { CallToolResult, LoggingLevel, ProgressToken, ServerContext } from '@modelcontextprotocol/server';

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
