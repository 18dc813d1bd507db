import type { Readable, Writable } from 'node:stream';
import type { JSONRPCMessage, Transport } from '@modelcontextprotocol/server';
import { ForgeMcpError } from './errors.js';
import { checkMessage, type ErrorAnswer, errorAnswer, parseErrorAnswer, peekId } from './jsonrpc.js';

/** How much of an oversized line's start and end is kept to find its id (the rest is never held). */
const PEEK_BYTES = 4096;

/**
 * MCP over newline-delimited JSON on a pair of streams, with a bound on one message. It stands in
 * for the SDK's `StdioServerTransport`, whose read buffer, once past its 10 MiB cap, closes the
 * session with no answer. Here a line of more than `maxMessageBytes` (without its newline) is
 * discarded as it streams, never buffered: only its first and last 4 KiB are kept, to answer it
 * with -32600 naming the limit and the request's id when those show it (else null); the session
 * goes on at the next newline. A stream that ends inside such a line cannot be resynchronised:
 * {@link failure} is set (`message_too_large`) and `onerror` called; the caller ends the session.
 *
 * Every line is answered as JSON-RPC wants: -32700 when it is not JSON, -32602 when `params` is
 * not an object, -32600 when it is not a JSON-RPC message, with the request's id when it has one.
 */
export class BoundedStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: <T extends JSONRPCMessage>(message: T) => void;
  /** Set when the input ended inside an oversized line: why the session could not go on. */
  failure: ForgeMcpError | undefined;

  private parts: Buffer[] = [];
  private size = 0;
  /** While discarding an oversized line: its size so far, its first and last bytes. */
  private over: { bytes: number; head: Buffer; tail: Buffer } | undefined;
  private started = false;
  private closed = false;

  constructor(
    private readonly stdin: Readable,
    private readonly stdout: Writable,
    private readonly maxMessageBytes: number,
  ) {}

  async start(): Promise<void> {
    if (this.started) throw new Error('BoundedStdioTransport already started (Server.connect() starts it)');
    this.started = true;
    this.stdin.on('data', this.onData);
    this.stdin.on('end', this.onEnd);
    this.stdin.on('error', this.onStreamError);
  }

  send(message: JSONRPCMessage | ErrorAnswer): Promise<void> {
    return new Promise((resolve) => {
      if (this.stdout.write(`${JSON.stringify(message)}\n`)) resolve();
      else this.stdout.once('drain', resolve);
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stdin.off('data', this.onData);
    this.stdin.off('end', this.onEnd);
    this.stdin.off('error', this.onStreamError);
    // Pause only a stdin no one else reads.
    if (this.stdin.listenerCount('data') === 0) this.stdin.pause();
    this.parts = [];
    this.over = undefined;
    this.onclose?.();
  }

  private readonly onData = (chunk: Buffer | string): void => {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    let start = 0;
    while (start < buf.length && !this.closed) {
      const nl = buf.indexOf(10, start);
      const piece = buf.subarray(start, nl < 0 ? buf.length : nl);
      this.take(piece);
      if (nl < 0) return;
      start = nl + 1;
      this.endLine();
    }
  };

  /** Adds a piece of the current line: kept while within the limit, else only its edges are. */
  private take(piece: Buffer): void {
    if (this.over) {
      this.over.bytes += piece.length;
      this.over.tail = lastBytes(this.over.tail, piece);
      return;
    }
    if (this.size + piece.length <= this.maxMessageBytes) {
      this.parts.push(piece);
      this.size += piece.length;
      return;
    }
    // Copies of the edges, so no chunk of the line stays referenced.
    const parts = [...this.parts, piece];
    this.over = { bytes: this.size + piece.length, head: edge(parts, 'head'), tail: edge(parts, 'tail') };
    this.parts = [];
    this.size = 0;
  }

  private endLine(): void {
    const over = this.over;
    if (over) {
      this.over = undefined;
      void this.send(this.tooLarge(over, true)).catch(() => {});
      return;
    }
    const line = Buffer.concat(this.parts, this.size);
    this.parts = [];
    this.size = 0;
    const text = line.toString('utf8').replace(/\r$/, '');
    if (text.trim() === '') return;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      this.answer(parseErrorAnswer(), err as Error);
      return;
    }
    const checked = checkMessage(value);
    if (!checked.ok) {
      this.answer(checked.answer, new Error(checked.answer.error.message));
      return;
    }
    try {
      this.onmessage?.(checked.message as JSONRPCMessage);
    } catch (err) {
      this.onerror?.(err as Error);
    }
  }

  private readonly onEnd = (): void => {
    const over = this.over;
    if (!over) return;
    this.over = undefined;
    const answer = this.tooLarge(over, false);
    this.failure = new ForgeMcpError('message_too_large', answer.error.message);
    void this.send(answer).catch(() => {});
    this.onerror?.(this.failure);
  };

  private readonly onStreamError = (err: Error): void => this.onerror?.(err);

  private answer(answer: ErrorAnswer, err: Error): void {
    void this.send(answer).catch(() => {});
    this.onerror?.(err);
  }

  private tooLarge(over: { bytes: number; head: Buffer; tail: Buffer }, ended: boolean): ErrorAnswer {
    const id = peekId(over.head.toString('utf8'), ended ? over.tail.toString('utf8') : '');
    const limit = this.maxMessageBytes;
    const message = ended
      ? `Request too large: a message of ${over.bytes} bytes is over the limit of ${limit} bytes (maxMessageBytes; forge serve --max-message-bytes); it was discarded unread, the session goes on`
      : `Request too large: the input ended inside a message of ${over.bytes} bytes or more, over the limit of ${limit} bytes (maxMessageBytes; forge serve --max-message-bytes), with no newline to resume at; the session ends. Send smaller messages or raise the limit`;
    return errorAnswer(id, -32600, message, { maxMessageBytes: limit, messageBytes: over.bytes });
  }
}

/** The last {@link PEEK_BYTES} of `kept` followed by `piece`, as a copy. */
function lastBytes(kept: Buffer, piece: Buffer): Buffer {
  if (piece.length >= PEEK_BYTES) return Buffer.from(piece.subarray(piece.length - PEEK_BYTES));
  const joined = Buffer.concat([kept, piece]);
  return Buffer.from(joined.subarray(Math.max(0, joined.length - PEEK_BYTES)));
}

/** A copy of the first or last {@link PEEK_BYTES} of the concatenated `parts`. */
function edge(parts: Buffer[], which: 'head' | 'tail'): Buffer {
  const picked: Buffer[] = [];
  let n = 0;
  const ordered = which === 'head' ? parts : [...parts].reverse();
  for (const p of ordered) {
    if (n >= PEEK_BYTES) break;
    const take = Math.min(p.length, PEEK_BYTES - n);
    picked.push(which === 'head' ? p.subarray(0, take) : p.subarray(p.length - take));
    n += take;
  }
  return Buffer.concat(which === 'head' ? picked : picked.reverse());
}
