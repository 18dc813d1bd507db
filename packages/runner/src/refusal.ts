/**
 * The one shape of a refusal, and its kinds. A kind is a stable string that tests and clients
 * assert, so the compiler rejects one that is not listed here: a new kind is documented first
 * (DESIGN "Error kinds", docs/architecture.md "Error kinds"), then added. A tool's own `ok:false`
 * kind is no refusal: it passes through in its envelope unchanged.
 */
export const REFUSAL_KINDS = Object.freeze([
  // DESIGN "Error kinds".
  'validation_failed',
  'unknown_tool',
  'name_taken',
  'name_forbidden',
  'namespace_denied',
  'static_check_failed',
  'acl.persona_denied',
  'policy_denied',
  'breaker_open',
  'tool_tampered',
  'secret_denied',
  'secret_missing',
  'vault_malformed',
  'bind_denied',
  'sandbox_unavailable',
  'timeout',
  'resource_limit',
  'output_invalid',
  'output_schema_failed',
  'promote_conflict',
  'internal',
  // docs/architecture.md "Error kinds": a damaged tool record (registry README too).
  'tool_damaged',
  // docs/architecture.md: no such proposal (the toolsmith).
  'unknown_proposal',
  // docs/architecture.md: a compare-and-set on a state lost (setState, the toolsmith).
  'state_conflict',
  // docs/architecture.md, runner README: the log takes no appends or its chain is broken.
  'audit_unavailable',
  // docs/architecture.md, runner README: the caller's signal aborted, or forge is shutting down.
  'cancelled',
  // docs/architecture.md, mcp.md: a gateway upstream could not be reached or ended mid-call.
  'upstream_unavailable',
  // docs/architecture.md, mcp.md: the upstream tool answered with isError.
  'upstream_error',
  // docs/architecture.md: an upstream's protocol version forge does not speak.
  'protocol_unsupported',
  // docs/architecture.md: an upstream's answer broke the protocol.
  'upstream_protocol',
  // docs/security.md, runner README (readRun, readArtifact): no such run for this caller.
  'not_found',
  // docs/architecture.md: apps/forge serve's toolsmith answer while the engine is still opening.
  'unavailable',
  // docs/architecture.md "Hooks": an operator's hook refused the call (exit 2; its stderr is the reason).
  'hook_denied',
  // docs/architecture.md "Hooks": a hook crashed, hung, printed garbage, or may not be trusted.
  'hook_failed',
] as const);

/** A refusal kind: one of {@link REFUSAL_KINDS}. */
export type RefusalKind = (typeof REFUSAL_KINDS)[number];

const KNOWN: ReadonlySet<string> = new Set(REFUSAL_KINDS);

/**
 * `kind` as a refusal kind, for kinds that come typed as plain strings from another package (a
 * registry store's failures): a kind forge does not document is a bug there, answered `internal`.
 */
export function refusalKind(kind: string): RefusalKind {
  return KNOWN.has(kind) ? (kind as RefusalKind) : 'internal';
}

/** An expected refusal: the error kind, and a message naming the field or rule. */
export interface Refusal {
  ok: false;
  kind: RefusalKind;
  message: string;
  [detail: string]: unknown;
}

/**
 * Why a call's signal was aborted, for its `cancelled` answer: the reason's message (forge serve
 * says "forge is shutting down (SIGTERM) and the grace period of 1000 ms ended"), else a plain
 * "the call was cancelled" (an abort() without a reason).
 */
export function stopReason(signal: AbortSignal): string {
  const r: unknown = signal.reason;
  if (typeof r === 'string' && r !== '') return r;
  if (r instanceof Error && r.name !== 'AbortError' && r.message !== '') return r.message;
  return 'the call was cancelled';
}

/** A refusal thrown from deep in a step (secrets, binds), turned into the call's audited answer. */
export class RefusalError extends Error {
  constructor(
    readonly kind: RefusalKind,
    message: string,
    readonly eventType = 'forge.called',
    /** More facts for the refusal's audit entry. */
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }
}
