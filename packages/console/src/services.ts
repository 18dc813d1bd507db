import type {
  AuditFilesView,
  DoctorView,
  GatewayDiffView,
  GatewayServerView,
  GatewayToolView,
  OverviewView,
  PolicyView,
  ProposalView,
  RefusalView,
  ToolView,
} from './views.js';

/** A proposal under review, as `forge toolsmith show` gives it (the page reads the fields it shows). */
export interface ReviewView {
  ok: true;
  proposal: {
    id: string;
    state: string;
    name: string;
    capability: string;
    persona: string;
    created_at: string;
    spec: { description?: string; runtime?: string; impl?: string; input_schema?: unknown; output_schema?: unknown; examples?: unknown };
    history: { at: string; state?: string; by?: string; note?: string; [k: string]: unknown }[];
    validation?: { ok?: boolean; summary?: string; [k: string]: unknown };
  };
  active?: { version: number; digest: string; state: string; proposal?: string };
  impl_diff: string;
  gap_history: readonly { at: string; persona: string; source: string; description?: string }[];
}

/** A run as `Forge.readRun` gives it: its manifest as written and what its artifacts directory holds. */
export interface RunView {
  ok: true;
  run_id: string;
  kind: 'run' | 'hit';
  manifest: Record<string, unknown>;
  artifacts: { path: string; size?: number; type?: string; [k: string]: unknown }[];
}

/** One artifact's bytes, as `Forge.readArtifact` gives them. */
export interface ArtifactView {
  ok: true;
  path: string;
  size: number;
  bytes: Uint8Array;
}

/** What an approval or rejection answers: the proposal's id, name and new state, and the tool that went live. */
export interface DecisionView {
  ok: true;
  id: string;
  name: string;
  state: string;
  tool?: { name: string; version: number; digest: string };
}

/**
 * What the console shows and changes, provided by whoever starts it (the `forge` app): each is the
 * same service the CLI's command of that name uses, so the console is never a second
 * implementation of an approval, a pin or a read. `operator` is the name the console acts as.
 */
export interface ConsoleServices {
  overview(operator: string): Promise<OverviewView>;
  /** `forge doctor`'s probe of the host (it starts a sandbox: the slow part of the overview, asked for apart). */
  doctor(): Promise<DoctorView>;
  tools(): Promise<ToolView[]>;
  /** The policy files as `forge policy check` reads them, the policy in force, and each rule's origin. */
  policy(): Promise<PolicyView>;
  /** The log's files, for the page's verifier and the server's index. */
  auditFiles(): Promise<AuditFilesView & { dir: string }>;
  /** A run, under the runner's read rule for the console's persona (the run's own persona, or an operator persona). */
  run(id: string): Promise<RunView | RefusalView>;
  /** One file among a run's artifacts, under the same rule. */
  artifact(id: string, path: string): Promise<ArtifactView | RefusalView>;
  proposals(): Promise<ProposalView[]>;
  proposal(id: string): Promise<ReviewView | RefusalView>;
  approve(id: string, operator: string): Promise<DecisionView | RefusalView>;
  /** The gateway's servers (none started), as `forge gateway list`. */
  gatewayServers(): Promise<GatewayServerView[] | RefusalView>;
  /** One server's tools against their pins (it is started), as `forge gateway tools`. */
  gatewayTools(server: string): Promise<GatewayToolView[] | RefusalView>;
  /** What changed against the pins, as `forge gateway diff`. */
  gatewayDiff(server: string): Promise<GatewayDiffView[] | RefusalView>;
  /**
   * Pins exactly the reviewed definitions (`expect`: tool → digest shown; `definition`: the server's
   * definition digest shown), as `forge gateway approve`.
   */
  gatewayApprove(
    server: string,
    reviewed: { expect: Record<string, string>; definition: string },
    operator: string,
  ): Promise<{ ok: true; approved: string[] } | RefusalView>;
  /** Unpins tools, as `forge gateway remove`. */
  gatewayUnpin(server: string, tools: string[], operator: string): Promise<{ ok: true; removed: string[] } | RefusalView>;
  reject(id: string, operator: string, reason: string): Promise<DecisionView | RefusalView>;
}
