import { createPublicKey } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { ConsoleServices, DecisionView, DoctorView, OverviewView, ReviewView, ToolView } from '@forge/console';
import { readAuditKey } from '@forge/runner';
import { gatewayServices } from './console-gateway.js';
import { policyView } from './console-policy.js';
import { callContext, type Engine } from './context.js';
import { diagnose } from './doctor.js';
import type { Store } from './store.js';
import type { Where } from './where.js';

/** How long one doctor's probe is shown before the overview probes again. */
const PROBE_MS = 10_000;

/**
 * The console's services over an open engine: each is what the CLI's command of the same name
 * calls (`forge doctor`, `forge status`, `forge tools list`, `forge toolsmith show/approve/reject`),
 * so a decision made in the page is the toolsmith's own, audited with `via: console`.
 */
export function consoleServices(w: Where, engine: Engine, store: Store, version: string): ConsoleServices {
  const { forge, toolsmith } = engine;
  const ctx = callContext(w.env);
  const auditDir = join(w.home, 'audit');
  let probe: { at: number; report: Promise<Awaited<ReturnType<typeof diagnose>>> } | undefined;
  /** The doctor's report, probed again once it is {@link PROBE_MS} old. */
  const diagnosis = () => {
    if (!probe || Date.now() - probe.at > PROBE_MS)
      probe = { at: Date.now(), report: diagnose({ home: w.home, project: w.project, env: w.env }) };
    return probe.report;
  };
  // Probed once at start, so the first look at the overview finds it done.
  void diagnosis().catch(() => {});

  return {
    ...gatewayServices(engine.gateway),
    async doctor(): Promise<DoctorView> {
      return doctorView(await diagnosis());
    },

    overview: (operator: string) => overviewOf(w, engine, store, version, operator),

    async policy() {
      return policyView(w, forge);
    },

    async tools(): Promise<ToolView[]> {
      const listed = await forge.listTools(ctx);
      return listed.map(({ tool: t, scope }) => ({
        name: t.name,
        description: t.description,
        version: t.version,
        digest: t.digest,
        scope,
        state: t.state,
        runtime: t.runtime,
        created_by: t.created_by.persona,
        input_schema: t.input_schema,
        ...(t.output_schema ? { output_schema: t.output_schema } : {}),
      }));
    },

    async auditFiles() {
      if (store.kind !== 'files')
        throw new Error(
          `the console's audit page reads the file log under ${auditDir}; this forge keeps its log in ${store.where} (read it with forge audit verify)`,
        );
      const names = await readdir(auditDir).catch(() => [] as string[]);
      const key = auditPublicKey(w.env);
      return {
        dir: auditDir,
        base: 'forge.log',
        names: names.filter((n) => n.startsWith('forge.log')),
        ...(key ? { publicKey: key } : {}),
      };
    },

    async run(id) {
      const r = await forge.readRun(id, ctx);
      if (!r.ok) return { ok: false, kind: r.kind, message: r.message };
      return { ok: true, run_id: r.run_id, kind: r.kind, manifest: r.manifest, artifacts: r.artifacts.map((a) => ({ ...a })) };
    },

    async artifact(id, path) {
      const r = await forge.readArtifact(id, path, ctx);
      if (!r.ok) return { ok: false, kind: r.kind, message: r.message };
      return { ok: true, path: r.path, size: r.size, bytes: r.bytes };
    },

    async proposals() {
      const list = await toolsmith.list({});
      return list.map((p) => ({
        id: p.id,
        name: p.name,
        state: p.state,
        capability: p.capability,
        persona: p.persona,
        created_at: p.created_at,
      }));
    },

    async proposal(id) {
      const r = await toolsmith.show(id);
      return r.ok ? (r as unknown as ReviewView) : { ok: false, kind: r.kind, message: r.message };
    },

    async approve(id, operator): Promise<DecisionView | { ok: false; kind: string; message: string }> {
      const r = await toolsmith.approve(id, { by: operator, via: 'console' });
      if (!r.ok) return { ok: false, kind: r.kind, message: r.message };
      return {
        ok: true,
        id: r.proposal.id,
        name: r.proposal.name,
        state: r.proposal.state,
        tool: { name: r.tool.name, version: r.tool.version, digest: r.tool.digest },
      };
    },

    async reject(id, operator, reason) {
      const r = await toolsmith.reject(id, { by: operator, reason, via: 'console' });
      if (!r.ok) return { ok: false, kind: r.kind, message: r.message };
      return { ok: true, id: r.proposal.id, name: r.proposal.name, state: r.proposal.state };
    },
  };
}

/** The doctor's report as the overview shows it. */
function doctorView(report: Awaited<ReturnType<typeof diagnose>>): DoctorView {
  return {
    checks: report.checks.map((c) => ({ name: c.name, ok: c.ok, detail: c.detail, ...(c.fix ? { fix: c.fix } : {}) })),
    ...(report.sandboxUser
      ? {
          sandbox: {
            ...report.sandboxUser,
            ...(report.limits ? { limits: { memory: report.limits.memory, cpu: report.limits.cpu, pids: report.limits.pids } } : {}),
          },
        }
      : {}),
  };
}

/** The public key of FORGE_AUDIT_KEY (PEM), which the audit page checks signed checkpoints against. */
function auditPublicKey(env: NodeJS.ProcessEnv): string | undefined {
  const key = readAuditKey(env.FORGE_AUDIT_KEY, 'FORGE_AUDIT_KEY');
  return key ? (createPublicKey(key).export({ type: 'spki', format: 'pem' }) as string) : undefined;
}

/** The overview page: what `forge status` and the engine know now (the doctor's probe is asked for apart). */
async function overviewOf(w: Where, engine: Engine, store: Store, version: string, operator: string): Promise<OverviewView> {
  const { forge, toolsmith } = engine;
  const pol = forge.policy();
  const snap = pol.ok ? pol.snapshot : undefined;
  const st = toolsmith.status();
  const [waiting, members, head, queue] = await Promise.all([
    toolsmith.list({ state: ['validated'] }).then((l) => l.length),
    store.presence().then((p) => p.list()),
    store.auditHead(),
    store.kind === 'postgres' || existsSync(join(store.where, 'queue')) ? store.queue().then((q) => q.stats()) : Promise.resolve(undefined),
  ]);
  // As `forge gateway list` has them (nothing is started): the tools approved for each.
  const reports = (await engine.gateway?.servers().catch(() => [])) ?? [];
  return {
    version,
    operator: { name: operator, approver: snap?.policy.toolsmith.approvers.includes(operator) ?? false },
    home: w.home,
    project: w.project,
    policy: pol.ok
      ? {
          ok: !(snap?.sources ?? []).some((s) => s.status === 'kept' || s.status === 'invalid'),
          files: (snap?.sources ?? []).filter((s) => s.status !== 'absent').map((s) => `${s.file} (${s.status})`),
        }
      : { ok: false, error: pol.message, files: [] },
    audit: {
      log: head.where,
      entries: head.seq,
      head: head.hash,
      signed: w.env.FORGE_AUDIT_KEY !== undefined && w.env.FORGE_AUDIT_KEY !== '',
    },
    toolsmith: { enabled: st.enabled, paused: st.paused, ...(st.pausedWhy ? { pausedWhy: st.pausedWhy } : {}), waiting },
    gateway: { servers: reports.map((r) => ({ name: r.name, tools: r.tools.approved, withheld: r.tools.withheld ?? 0, state: r.state })) },
    ...(queue ? { queue } : {}),
    members: members.map((m) => ({
      kind: m.kind,
      name: m.name,
      host: m.host,
      pid: m.pid,
      alive: m.alive,
      ...(m.facts ? { facts: m.facts } : {}),
    })),
  };
}
