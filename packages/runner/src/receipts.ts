/**
 * A call's receipt (DESIGN "Transparency log"): the entries written while the call runs are
 * collected here, and its answer names its own entry in `meta.audit`: `seq` (what `forge audit
 * prove` takes), `index` (its leaf in the log's Merkle tree, `seq - 1`) and `leaf_hash`. A
 * checkpoint signed after it makes the pair provable with `forge audit prove`.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Envelope } from './envelope.js';

/** The name forge's key signs the audit log's tree checkpoints under (a C2SP signed-note key name). */
export const AUDIT_KEY_NAME = 'forge-operator';

/** What `meta.audit` holds. */
export interface AuditReceipt {
  seq: number;
  index: number;
  /** 64 hex digits; absent from a store that does not report it. */
  leaf_hash?: string;
}

/** The entries written under one call, in order. */
export class CallReceipts {
  readonly #entries: { type: string; receipt: AuditReceipt }[] = [];

  /** An entry of the call is durable as `seq`, with its leaf hash when the store reports one. */
  entry(type: string, seq: number, leaf: string | undefined): void {
    this.#entries.push({ type, receipt: { seq, index: seq - 1, ...(leaf ? { leaf_hash: leaf } : {}) } });
  }

  /** The receipt of the call's own entry (of `type`), if this process wrote it. */
  of(type: string): AuditReceipt | undefined {
    return this.#entries.find((e) => e.type === type)?.receipt;
  }
}

const current = new AsyncLocalStorage<CallReceipts>();

/** Runs one call collecting the entries written under it. */
export function collectReceipts<T>(receipts: CallReceipts, run: () => Promise<T>): Promise<T> {
  return current.run(receipts, run);
}

/** The call an entry written now belongs to, if one is running. */
export function activeReceipts(): CallReceipts | undefined {
  return current.getStore();
}

/**
 * The answer with its receipt: the call's own entry when this process wrote it; else the one it
 * already carries (a worker's, for a dispatched call; a tool's own `meta.audit` never gets here).
 */
export function withReceipt(envelope: Envelope, receipt: AuditReceipt | undefined): Envelope {
  if (!receipt) return envelope;
  return { ...envelope, meta: { ...envelope.meta, audit: receipt } } as Envelope;
}
