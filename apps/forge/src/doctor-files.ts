import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { EffectivePolicy } from '@forge/policy';
import type { Registry, Scope, ScopeRoots } from '@forge/registry';
import type { Check } from './doctor-check.js';
import type { Where } from './where.js';

/**
 * `forge doctor`'s look at what forge keeps in files and reads at every start, read the way forge
 * reads it: the tool records of the user and project scopes (in the store this invocation names)
 * and of every session and task directory of the project; the toolsmith's proposal files; the
 * gateway's pins.json. A record that cannot be used is a problem with its fix, never a silent
 * gap: a damaged tool is refused (`tool_damaged`) and hides a tool of its name below it, a damaged
 * proposal cannot be approved, and untrusted pins serve no gateway tool. Reads only.
 */
export async function storedFileChecks(w: Where, effective?: EffectivePolicy): Promise<Check[]> {
  return [
    ...(await toolRecordChecks(w)),
    ...(await proposalFileChecks(w.project)),
    ...(await pinsChecks(w)),
    ...(await hooksChecks(w, effective)),
  ];
}

/**
 * The call hooks, read as a call reads them: how many apply, or the file that makes every call
 * they apply to refused (a link, someone else's, writable by others), with its fix.
 */
async function hooksChecks(w: Where, effective: EffectivePolicy | undefined): Promise<Check[]> {
  const { findHooks } = await import('@forge/runner');
  const roots = [join(w.home, 'hooks'), ...(effective?.hooks.project ? [join(w.project, '.forge', 'hooks')] : [])];
  if (!roots.some((r) => existsSync(r))) return [];
  const names = new Set<string>(['']);
  for (const r of roots) {
    try {
      for (const n of readdirSync(join(r, 'tools'))) names.add(n);
    } catch {
      // no per-tool hooks there
    }
  }
  let count = 0;
  const seen = new Set<string>();
  for (const name of names)
    for (const stage of ['pre', 'post'] as const) {
      const found = findHooks(roots, name, stage);
      if (!found.ok)
        return [
          {
            name: 'hooks',
            ok: false,
            detail: `${found.path} ${found.message}: every call it applies to is refused (hook_failed)`,
            fix: `make it a real file or directory of yours (or root's) that no one else can write, or remove it`,
          },
        ];
      for (const h of found.hooks) if (!seen.has(h.path) && seen.add(h.path)) count++;
    }
  return [{ name: 'hooks', ok: true, detail: `${count} hook${count === 1 ? '' : 's'} in ${roots.join(' and ')}` }];
}

const TOOLS = 'tool files';

/** One check per damaged or unreadable tool record, or one line saying how many tools read. */
async function toolRecordChecks(w: Where): Promise<Check[]> {
  const [{ createRegistry, scopeRoots }, { META_TOOLS }, { openStore }] = await Promise.all([
    import('@forge/registry'),
    import('@forge/runner'),
    import('./store.js'),
  ]);
  let store: Awaited<ReturnType<typeof openStore>>;
  try {
    store = await openStore(w);
  } catch (err) {
    return [
      { name: TOOLS, ok: false, detail: `the tool store cannot be opened: ${(err as Error).message}`, fix: 'fix the store first (above)' },
    ];
  }
  try {
    const stores = store.forgeOptions(META_TOOLS).toolStores;
    const shared = {
      roots: scopeRoots({ forgeHome: w.home, project: w.project }),
      stores: { user: stores?.('user', {}), project: stores?.('project', {}) },
    };
    const registries: Registry[] = [createRegistry({ ...shared, builtins: META_TOOLS })];
    // Session and task scopes on disk (a database keeps those by id: nothing to walk).
    if (store.kind === 'files')
      for (const roots of sessionRoots(w.project)) registries.push(createRegistry({ roots, builtins: META_TOOLS }));
    const out: Check[] = [];
    let tools = 0;
    for (const r of registries) {
      const report = await r.load();
      tools += Object.values(report.loaded).reduce((a, b) => a + (b ?? 0), 0);
      const damaged = new Set(r.listDamaged().map((d) => `${d.scope}\0${d.path}`));
      for (const d of r.listDamaged()) out.push(damagedCheck(d));
      for (const f of report.failed) if (!damaged.has(`${f.scope}\0${f.path}`)) out.push(strayCheck(f.scope, f.path, f.reason));
    }
    if (out.length === 0)
      out.push({
        name: TOOLS,
        ok: true,
        detail: `${tools} tool(s) read from ${store.kind === 'files' ? 'their files' : store.where}; none damaged`,
      });
    return out;
  } catch (err) {
    return [{ name: TOOLS, ok: false, detail: `the tools cannot be read: ${(err as Error).message}`, fix: 'fix what the message names' }];
  } finally {
    await store.close();
  }
}

function damagedCheck(d: { name: string; scope: Scope; path: string; reason: string }): Check {
  return {
    name: TOOLS,
    ok: false,
    detail: `"${d.name}" (${d.scope} scope) is damaged: ${d.path}: ${d.reason}; calls to it are refused (tool_damaged) and it hides any "${d.name}" of a less specific scope`,
    fix: `forge tools remove ${d.name} --scope ${d.scope} (an operator persona, or the owner of its namespace), then forge it again; or restore the file from a copy`,
  };
}

/** A file in a tool directory that names no tool (a name outside the grammar, a built-in name). */
function strayCheck(scope: Scope, path: string, reason: string): Check {
  return {
    name: TOOLS,
    ok: false,
    detail: `${path} (${scope} scope) is not a tool forge can load: ${reason}`,
    fix: `move it out of the tool directory; forge never runs it`,
  };
}

/** The roots of every session and task directory under `<project>/.forge/sessions`. */
function sessionRoots(project: string): ScopeRoots[] {
  const sessions = join(project, '.forge', 'sessions');
  const out: ScopeRoots[] = [];
  for (const s of dirs(sessions)) {
    const tools = join(sessions, s, 'tools');
    if (existsSync(tools)) out.push({ session: tools });
    for (const t of dirs(join(sessions, s, 'tasks'))) {
      const taskTools = join(sessions, s, 'tasks', t, 'tools');
      if (existsSync(taskTools)) out.push({ task: taskTools });
    }
  }
  return out;
}

function dirs(path: string): string[] {
  try {
    return readdirSync(path, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
  } catch {
    return [];
  }
}

/** One check per proposal file the toolsmith skips (the file store under the project only). */
async function proposalFileChecks(project: string): Promise<Check[]> {
  const dir = join(project, '.forge', 'toolsmith');
  if (!existsSync(join(dir, 'proposals'))) return [];
  const { openProposalStore } = await import('@forge/toolsmith');
  const out: Check[] = [];
  try {
    await openProposalStore({
      dir,
      onProblem: (file, reason) =>
        out.push({
          name: 'proposal files',
          ok: false,
          detail: `${file} is damaged: ${reason}; the toolsmith skips it, so it is neither listed nor approved`,
          fix: `restore it from a copy, or move it away and propose the tool again`,
        }),
    }).list();
  } catch (err) {
    out.push({ name: 'proposal files', ok: false, detail: (err as Error).message, fix: 'fix what the message names' });
  }
  return out;
}

/**
 * pins.json checked as the gateway checks it (against the audit log's last `gateway.approved` or
 * `gateway.unpinned`): one that cannot be trusted serves no upstream tool until approved again.
 * Only with the file audit log (a database's log keeps its own).
 */
async function pinsChecks(w: Where): Promise<Check[]> {
  const dir = join(w.home, 'gateway');
  const { storeUrl } = await import('./store.js');
  let files: boolean;
  try {
    files = storeUrl(w.env) === undefined;
  } catch {
    files = false; // a malformed --store: the store check says so
  }
  if (!files || !existsSync(join(dir, 'pins.json'))) return [];
  const [{ openPinStore }, { tailLog }] = await Promise.all([import('@forge/gateway'), import('@forge/audit-chain')]);
  const log = join(w.home, 'audit', 'forge.log');
  const lastAudited = async (type: string) => {
    let found: Record<string, unknown> | undefined;
    if (!existsSync(log)) return undefined;
    for await (const e of tailLog(log)) if (e.type === type) found = e.data as Record<string, unknown>;
    return found;
  };
  const r = await openPinStore({ dir, lastAudited }).read();
  if (r.ok) return [];
  return [
    {
      name: 'gateway pins',
      ok: false,
      detail: r.message,
      fix: 'forge gateway approve <server> for each server whose tools should be served',
    },
  ];
}
