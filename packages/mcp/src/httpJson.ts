/** JSON over HTTP: a request body read within a limit, and JSON-RPC errors answered with an HTTP status. */
import type { IncomingMessage, ServerResponse } from 'node:http';

type ReadResult = { ok: true; value: unknown } | { ok: false; status: number; code: number; message: string };

/** The JSON body of `req`, read up to `limit` bytes; else the status and JSON-RPC error to answer. */
export async function readJson(req: IncomingMessage, limit: number): Promise<ReadResult> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit)
      return {
        ok: false,
        status: 413,
        code: -32600,
        message: `request body too large: over the limit of ${limit} bytes (maxBodyBytes; forge serve --max-message-bytes); send smaller messages or raise the limit`,
      };
    chunks.push(chunk);
  }
  try {
    return { ok: true, value: JSON.parse(Buffer.concat(chunks).toString('utf8')) };
  } catch {
    return { ok: false, status: 400, code: -32700, message: 'parse error: the body is not JSON' };
  }
}

/** A JSON-RPC error body with an HTTP status (the transport's own error shape), answering request `id` when known. */
export function fail(res: ServerResponse, status: number, message: string, code = -32000, id: string | number | null = null): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id }));
}

/** The id of a JSON-RPC request body, or null. */
export function requestId(body: unknown): string | number | null {
  const id = (body as { id?: unknown } | null)?.id;
  return typeof id === 'string' || typeof id === 'number' ? id : null;
}
