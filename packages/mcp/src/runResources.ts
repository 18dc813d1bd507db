/** Run manifests and artifacts as MCP resources (`forge://runs/<run_id>/…`). */
import { type CallContext, type Forge, parseRunUri } from '@forge/runner';
import {
  ProtocolError,
  ProtocolErrorCode,
  type ReadResourceResult,
  ResourceNotFoundError,
  type ResourceTemplateType,
} from '@modelcontextprotocol/server';

export const RUN_TEMPLATES: ResourceTemplateType[] = [
  {
    uriTemplate: 'forge://runs/{run_id}/manifest',
    name: 'run_manifest',
    title: 'Run manifest',
    description:
      'What forge recorded of one call: the tool and its digest, the sandbox profile, limits, timings, outcome, events and artifacts. Readable by the persona that made the call, and by operators.',
    mimeType: 'application/json',
  },
  {
    uriTemplate: 'forge://runs/{run_id}/artifacts/{path}',
    name: 'run_artifact',
    title: 'Run artifact',
    description:
      'A file a tool wrote under /forge/artifacts (and the full stdout of a truncated answer, full_stdout.bin). Readable by the persona that made the call, and by operators.',
  },
];

/** Largest artifact `resources/read` returns. */
export const MAX_RESOURCE_BYTES = 16 * 1024 * 1024;

const TEXT = /^(text\/|application\/(json|xml|x-ndjson|csv|yaml|javascript)\b)/;

/** `resources/read` of a `forge://runs/…` URI, for the caller `ctx`. */
export async function readRunResource(forge: Forge, uri: string, ctx: CallContext): Promise<ReadResourceResult> {
  const parsed = parseRunUri(uri);
  if (!parsed)
    throw new ProtocolError(
      ProtocolErrorCode.InvalidParams,
      `${uri} is not a run resource: use forge://runs/<run_id>/manifest or forge://runs/<run_id>/artifacts/<path>`,
    );
  if (parsed.kind === 'manifest') {
    const run = await forge.readRun(parsed.runId, ctx);
    if (!run.ok) throw refused(uri, run);
    const text = JSON.stringify({ run_id: run.run_id, kind: run.kind, manifest: run.manifest, artifacts: run.artifacts }, null, 2);
    return { contents: [{ uri, mimeType: 'application/json', text }] };
  }
  const file = await forge.readArtifact(parsed.runId, parsed.path, { ...ctx, maxBytes: MAX_RESOURCE_BYTES });
  if (!file.ok) throw refused(uri, file);
  if (TEXT.test(file.mime_type) && isUtf8(file.bytes))
    return { contents: [{ uri, mimeType: file.mime_type, text: file.bytes.toString('utf8') }] };
  return { contents: [{ uri, mimeType: file.mime_type, blob: file.bytes.toString('base64') }] };
}

function refused(uri: string, r: { kind: string; message: string }): ProtocolError {
  if (r.kind === 'not_found') return new ResourceNotFoundError(uri, r.message);
  return new ProtocolError(ProtocolErrorCode.InvalidParams, `${r.kind}: ${r.message}`, { kind: r.kind });
}

function isUtf8(b: Buffer): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(b);
    return true;
  } catch {
    return false;
  }
}
