import type { BreakerSettings, Budget, ClampedField, NetworkGrant } from '@forge/policy';
import type { Scope, ToolState } from '@forge/registry';

/**
 * One tool as a caller may see it, in full: what it is, where it came from, what a run of it may
 * touch and how policy judges a call of it by this caller now. `Forge.describeTools` makes them
 * with the call pipeline's own gate functions, so a card never says "allowed" where a call would
 * be refused by one of those gates (what only a call can know, its input's binds and breakers'
 * counts, is described, not judged).
 */
export interface ToolCard {
  name: string;
  /** The name MCP clients see. */
  wireName: string;
  description: string;
  inputSchema: unknown;
  outputSchema?: unknown;
  /** Forged (its scope and who forged it), or served by a tool source (the gateway: which server and upstream tool). */
  origin:
    | { kind: 'forged'; scope: Scope; forgedBy: { persona: string; session: string } }
    | { kind: 'source'; source: string; server: string; tool: string; transport: string; sandboxed: boolean };
  status: {
    state: ToolState;
    /** A forged tool's version (a source's tools have none). */
    version?: number;
    digest: string;
  };
  cap: ToolCap;
  policy: ToolPolicyView;
}

/** What a run of the tool may touch (see {@link ToolCard}). */
export interface ToolCap {
  /** A forged tool's runtime, as its spec names it (`python3`). */
  runtime?: string;
  /** Whether the run is sandboxed: always for a forged tool; a source's tool as its server runs. */
  sandboxed: boolean;
  /** Where the input schema marks host paths (`x-bind`), as JSON pointers into the schema, with their mode. */
  binds: { at: string; mode: 'ro' | 'rw' }[];
  /** Where a bound path may point (policy `bind_roots`, expanded). */
  bindRoots: string[];
  /** The caller's network grant (closed unless policy opens it). */
  network: NetworkGrant;
  /** The vault names of the secrets a run gets. */
  secrets: string[];
  /** The budget a call gets: the tool's requests lowered to policy's ceilings. */
  limits: Budget;
  /** The requests that were lowered. */
  clamped: ClampedField[];
}

/** How policy judges a call of the tool by the caller now (see {@link ToolCard}). */
export interface ToolPolicyView {
  persona: string;
  /** True when every gate below lets a call through. */
  allowed: boolean;
  /** Each gate a call passes before it runs, in order, with its verdict. */
  gates: { gate: string; ok: boolean; kind?: string; message?: string }[];
  /** The breakers that apply to every call (counted per session). */
  breakers: BreakerSettings;
  /** `sha256:` of the policy and rules in force. */
  digest: string;
  /** The files the policy came from, and their state. */
  sources: { file: string; kind: string; status: string }[];
  /**
   * The operator's hooks a call of the tool meets, in order, each with the digest of its bytes now;
   * or why none can run (a hook file someone else could have written: then every call is refused).
   */
  hooks: { pre: { path: string; digest: string }[]; post: { path: string; digest: string }[] } | { problem: string };
}
