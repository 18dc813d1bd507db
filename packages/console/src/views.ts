/**
 * What the console's API answers: plain JSON the server sends and the page reads. Every string in
 * it that an agent, a tool or an upstream wrote is made inert by the page before it is shown
 * (`web/api.ts`), whatever page shows it.
 */

/** What `forge doctor` found: every check, and who sandboxes run as under which limits. */
export interface DoctorView {
  checks: CheckView[];
  sandbox?: { uid: number; gid: number; droppedFromRoot: boolean; limits?: { memory: string; cpu: string; pids: string } };
}

/** One check of `forge doctor`: what, whether it holds, the detail and the fix. */
export interface CheckView {
  name: string;
  ok: boolean;
  detail: string;
  fix?: string;
}

/** The overview page: what `forge doctor` and `forge status` know. */
export interface OverviewView {
  version: string;
  /** Who the console acts as (`--as`), and whether policy lets that name approve. */
  operator: { name: string; approver: boolean };
  home: string;
  project: string;
  policy: {
    ok: boolean;
    error?: string;
    files: string[];
    /** The newest `policy.reload_failed` of the audit log, when no reload succeeded after it. */
    lastReloadError?: { seq: number; ts: string; file?: string; line?: number; column?: number; message: string; kept?: string };
  };
  audit: { log: string; entries: number; head: string; signed: boolean };
  toolsmith: { enabled: boolean; paused: boolean; pausedWhy?: string; waiting: number };
  gateway: { servers: { name: string; tools: number; withheld: number; state: string }[] };
  queue?: { pending: number; claimed: number; done: number; failed: number };
  /** Front-ends and workers, with what each says of itself (a server's sandboxes built ahead and warm pools among its facts). */
  members: { kind: string; name: string; host: string; pid: number; alive: boolean; facts?: Record<string, string | number | boolean> }[];
}

export type { CallView } from './calls.js';

/** A page of rows, newest first, and how to ask for the next. */
export interface Page<T> {
  rows: T[];
  /** Rows matching the filter in the whole log. */
  total: number;
  /** Pass as `before` for the next (older) page; absent on the last page. */
  next?: number;
}

/** A page of the audit log's entries, with the newest entry's seq then (where the live tail starts). */
export interface EntriesPage extends Page<EntryView> {
  newest: number;
}

/** One audit entry as the page shows it: its fields and the exact line (without its newline). */
export interface EntryView {
  seq: number;
  ts: string;
  type: string;
  file: string;
  line: number;
  text: string;
}

/** Where the log is: its base name and the files beside it (what the page's verifier reads). */
export interface AuditFilesView {
  base: string;
  names: string[];
  /** The public key checkpoints are signed with, when one is configured (PEM). */
  publicKey?: string;
}

/** Per-tool figures over a window. */
export interface ToolStatsView {
  name: string;
  calls: number;
  errors: number;
  p50_ms?: number;
  p99_ms?: number;
}

/** The charts' series: one bucket per minute (hour window) or per 15 minutes (day window). */
export interface StatsView {
  window: 'hour' | 'day';
  bucket_ms: number;
  /** Bucket start times (ms since the epoch). */
  t: number[];
  calls: number[];
  p50: (number | null)[];
  p99: (number | null)[];
  /** Errors by kind, one series per kind. */
  errors: Record<string, number[]>;
  tools: ToolStatsView[];
}

/** A tool as the tools page lists it. */
export interface ToolView {
  name: string;
  version?: number;
  digest?: string;
  scope?: string;
  state?: string;
  description: string;
  created_by?: string;
  runtime?: string;
  input_schema?: unknown;
  output_schema?: unknown;
  source?: string;
}

/** A proposal as the approvals page lists it. */
export interface ProposalView {
  id: string;
  name: string;
  state: string;
  capability: string;
  persona: string;
  created_at: string;
}

/** A refusal from a service: the kind and the sentence that says what to do. */
export interface RefusalView {
  ok: false;
  kind: string;
  message: string;
}

/** The policy page: the files, the policy in force, and which file set each rule. */
export interface PolicyView {
  files: { file: string; role: string; kind: string; status: string; problem?: { line?: number; column?: number; message: string } }[];
  /** The merged policy in force now (the engine's snapshot). */
  effective: Record<string, unknown>;
  /** A rule's path (`breakers`, `persona_namespaces.agent`, `toolsmith.approvers`) → the file that set it, or `bundle defaults`. */
  origin: Record<string, string>;
  /** Every persona the policy names. */
  personas: string[];
}

/** One upstream server of gateway.json, as `forge gateway list` shows it. */
export interface GatewayServerView {
  name: string;
  transport: string;
  sandboxed: boolean;
  from: string;
  state: string;
  tools: { approved: number; withheld?: number };
  error?: string;
  /** The digest of that definition (its executable's bytes included), which an approval names. */
  definitionDigest?: string;
  /**
   * What an approval covers besides the tools, exactly the parts the digest is made of: the file
   * and level that declared it, transport, command, arguments, working directory, environment,
   * secrets (variable → vault name, never a value), URL, binds, network, limits, and the files that
   * run (executable and scripts) with their digests.
   */
  definition?: { file: string; [part: string]: unknown };
}

/** One tool a server lists now, against its pin (`forge gateway tools`). */
export interface GatewayToolView {
  server: string;
  tool: string;
  name: string;
  /** approved, new, changed, removed, not_allowed */
  status: string;
  digest?: string;
  pinned?: string;
  definition?: { description?: string; inputSchema?: unknown; outputSchema?: unknown; annotations?: unknown; [k: string]: unknown };
}

/** What changed against the pins (`forge gateway diff`). */
export interface GatewayDiffView {
  tool: string;
  status: string;
  old?: { digest: string; definition: Record<string, unknown> };
  new?: { digest: string; definition: Record<string, unknown> };
  fields: string[];
}
