/** One schema change: applied once, in its own transaction, in `version` order. */
export interface Migration {
  /**
   * Positive and increasing along the list; never reused or renumbered once released. Each store
   * owns a range (1–9 the audit log, 10–19 the registry, …), so versions may have gaps.
   */
  version: number;
  /** Short name shown by `migrationStatus` and `forge doctor`. */
  name: string;
  sql: string;
}
