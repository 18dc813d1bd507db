import type { Readable, Writable } from 'node:stream';
import { deserializeMessage, type JSONRPCMessage, serializeMessage, type Transport } from '@modelcontextprotocol/client';

/**
 * The MCP client transport over a long-lived upstream process's pipes (sandboxed or not):
 * newline-delimited JSON-RPC, as the MCP stdio transport frames it, with a bound on each message
 * so an upstream that writes an endless line costs the host a bounded amount of memory.
 */

/** Why a process ended, as the gateway reports it. */
export interface ChildExit {
  /** `exit` (it ended by itself), `signal`, `killed` (forge stopped it), or the sandbox's own reason (`memory`, `cpu`, …). */
  reason: string;
  exitCode: number | null;
  signal: string | null;
  durationMs?: number;
  stderrTail: string;
}

/** A long-lived upstream process: what the transport needs of it. */
export interface UpstreamChild {
  stdin: Writable;
  stdout: Readable;
  /** The host pid (of bwrap for a sandboxed one), when known. */
  pid?: number;
  /** The last bytes it wrote to stderr (bounded), for error messages. */
  stderrTail(): string;
  /** Stops it (the whole sandbox for a sandboxed one). Idempotent. */
  kill(): void;
  /** Settles once when it has ended, never rejects. */
  exited: Promise<ChildExit>;
}

/** Largest JSON-RPC message accepted from an upstream (bytes, without the newline). */
export const DEFAULT_MAX_MESSAGE_BYTES = 16 << 20;

const NL = 0x0a;

/**
 * A {@link Transport} over an {@link UpstreamChild}. A message longer than `maxMessageBytes`
 * kills the child and closes the transport with an error naming the bound; a line that is not a
 * JSON-RPC message is reported through `onerror` and skipped (as the SDK's stdio transport does).
 */
export class ChildTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: <T extends JSONRPCMessage>(message: T) => void;
  /** The protocol version the upstream answered `initialize` with (even one the client then refuses). */
  answeredVersion: string | undefined;
  /** Why the transport closed, when it was not `close()`. */
  closeReason: string | undefined;

  readonly #child: UpstreamChild;
  readonly #max: number;
  readonly #label: string;
  #chunks: Buffer[] = [];
  #size = 0;
  #closed = false;
  #started = false;
  #queue: Promise<void> = Promise.resolve();

  constructor(child: UpstreamChild, options: { maxMessageBytes?: number; label: string }) {
    this.#child = child;
    this.#max = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    this.#label = options.label;
  }

  async start(): Promise<void> {
    if (this.#started) throw new Error(`${this.#label}: the transport is already started`);
    this.#started = true;
    const out = this.#child.stdout;
    out.on('data', (chunk: Buffer) => this.#push(chunk));
    out.on('error', (err) => this.onerror?.(err));
    this.#child.stdin.on('error', (err) => this.onerror?.(err));
    void this.#child.exited.then(
      () => this.#end(),
      (err: unknown) => this.onerror?.(err as Error),
    );
  }

  #push(chunk: Buffer): void {
    if (this.#closed) return;
    let from = 0;
    for (;;) {
      const nl = chunk.indexOf(NL, from);
      if (nl === -1) break;
      const part = chunk.subarray(from, nl);
      if (this.#size + part.length > this.#max) {
        this.#overflow();
        return;
      }
      const line = this.#chunks.length === 0 ? part : Buffer.concat([...this.#chunks, part]);
      this.#chunks = [];
      this.#size = 0;
      this.#deliver(line);
      if (this.#closed) return;
      from = nl + 1;
    }
    if (from < chunk.length) {
      const rest = chunk.subarray(from);
      if (this.#size + rest.length > this.#max) {
        this.#overflow();
        return;
      }
      this.#chunks.push(rest);
      this.#size += rest.length;
    }
  }

  #deliver(line: Buffer): void {
    let text = line.toString('utf8');
    if (text.endsWith('\r')) text = text.slice(0, -1);
    if (text.trim() === '') return;
    let message: JSONRPCMessage;
    try {
      message = deserializeMessage(text);
    } catch (err) {
      this.onerror?.(new Error(`${this.#label}: the upstream wrote a line that is not a JSON-RPC message`, { cause: err }));
      return;
    }
    const result = (message as { result?: { protocolVersion?: unknown } }).result;
    if (this.answeredVersion === undefined && result && typeof result.protocolVersion === 'string') {
      this.answeredVersion = result.protocolVersion;
    }
    // One message per turn of the microtask queue: the SDK runs a notification's handler a
    // microtask after receiving it, but settles a response at once, so a progress notification
    // and the response right behind it in one chunk would lose the progress (its token is gone).
    this.#queue = this.#queue.then(() => {
      try {
        this.onmessage?.(message);
      } catch (err) {
        this.onerror?.(err instanceof Error ? err : new Error(String(err)));
      }
    });
  }

  #overflow(): void {
    this.closeReason = `it wrote a message over ${this.#max} bytes (the gateway's bound per message); it was stopped`;
    this.#chunks = [];
    this.#size = 0;
    this.onerror?.(new Error(`${this.#label}: ${this.closeReason}`));
    this.#child.kill();
    this.#end();
  }

  #end(): void {
    if (this.#closed) return;
    this.#closed = true;
    // After the messages read before the end: a last answer still reaches its caller.
    this.#queue = this.#queue.then(() => this.onclose?.());
  }

  send(message: JSONRPCMessage): Promise<void> {
    if (this.#closed) return Promise.reject(new Error(`${this.#label}: the upstream is not connected`));
    const stdin = this.#child.stdin;
    return new Promise((resolve, reject) => {
      const ok = stdin.write(serializeMessage(message), (err) => {
        if (err) reject(new Error(`${this.#label}: cannot write to the upstream: ${err.message}`));
      });
      if (ok) resolve();
      else stdin.once('drain', resolve);
    });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    try {
      this.#child.stdin.end();
    } catch {
      // already gone
    }
    this.#child.kill();
    this.#end();
  }
}
