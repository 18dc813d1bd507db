import {
  type AppendResult,
  type AuditEntry,
  AuditError,
  type AuditLog,
  type Checkpoint,
  type EntriesOptions,
  type JsonValue,
  type LogHead,
  type OpenAuditLogOptions,
  openAuditLog,
  type RotateResult,
} from '@forge/audit-chain';

/** forge's audit log as the engine holds it, and the damage that keeps it from taking appends. */
export interface EngineAudit {
  log: AuditLog;
  /** Why the log takes no appends from the start (`log_corrupt`), when it does not. */
  damage?: unknown;
}

/**
 * Opens forge's audit log for the engine. A log whose chain is broken (`log_corrupt`: an entry
 * after its newest checkpoint that does not verify) does not stop the engine: it gets a log that
 * opens the file again at each operation and until then fails with the error the file gives, and
 * `damage` says why. The engine then starts with its gate closed (auditGate.ts): forge lists its
 * tools, refuses every call and forge with `audit_unavailable` naming the entry and the fix, and
 * takes work again at the first call after the log was restored or moved aside. Every other
 * refusal of the log (`log_behind_checkpoint`, `log_unanchored`, a directory it cannot use)
 * still stops the engine.
 */
export async function openEngineAudit(path: string, options: OpenAuditLogOptions): Promise<EngineAudit> {
  try {
    return { log: await openAuditLog(path, options) };
  } catch (err) {
    if ((err as { code?: unknown }).code !== 'log_corrupt') throw err;
    return { log: new ReopeningLog(path, options), damage: err };
  }
}

/**
 * A log that did not open: each operation first opens it (one attempt at a time, each checking
 * the chain again), then is the opened log's. Nothing was appended through it before that, so a
 * flush has nothing to wait for.
 */
class ReopeningLog implements AuditLog {
  #log: AuditLog | undefined;
  #opening: Promise<AuditLog> | undefined;
  #closed = false;

  constructor(
    readonly path: string,
    private readonly options: OpenAuditLogOptions,
  ) {}

  append(type: string, data?: JsonValue): Promise<AppendResult> {
    return this.#open().then((log) => log.append(type, data));
  }

  checkpoint(): Promise<Checkpoint> {
    return this.#open().then((log) => log.checkpoint());
  }

  rotate(): Promise<RotateResult> {
    return this.#open().then((log) => log.rotate());
  }

  head(): Promise<LogHead> {
    return this.#open().then((log) => log.head());
  }

  entries(options?: EntriesOptions): AsyncIterable<AuditEntry> {
    const open = () => this.#open();
    return {
      async *[Symbol.asyncIterator]() {
        yield* (await open()).entries(options);
      },
    };
  }

  flush(): Promise<void> {
    return this.#log ? this.#log.flush() : Promise.resolve();
  }

  async close(): Promise<void> {
    this.#closed = true;
    const log = this.#log ?? (await this.#opening?.catch(() => undefined));
    await log?.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #open(): Promise<AuditLog> {
    if (this.#log) return Promise.resolve(this.#log);
    if (this.#closed) return Promise.reject(new AuditError('closed', `log ${this.path} is closed; open it again`));
    this.#opening ??= openAuditLog(this.path, this.options).then(
      (log) => {
        this.#log = log;
        this.#opening = undefined;
        return log;
      },
      (err: unknown) => {
        this.#opening = undefined;
        throw err;
      },
    );
    return this.#opening;
  }
}
