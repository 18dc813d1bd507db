/**
 * The MCP surface beyond tools: prompts, completions and resources (tool specs, run manifests
 * and artifacts, the verified audit tail), added to a server built by `buildServer`.
 */
import type { CallContext, Forge } from '@forge/runner';
import {
  ProtocolError,
  ProtocolErrorCode,
  type ReadResourceResult,
  type Resource,
  ResourceNotFoundError,
  type ResourceTemplateType,
  type Server,
} from '@modelcontextprotocol/server';
import { completePromptArgument, getPrompt, PROMPTS, SCOPES } from './prompts.js';
import { RUN_TEMPLATES, readRunResource } from './runResources.js';
import { findView, type ToolView } from './schema.js';
import { readSkillFile, type SkillSet } from './skills.js';

/** What the surface needs of the server it is added to. */
export interface SurfaceDeps {
  ready(): Forge | Promise<Forge>;
  ctx: CallContext;
  /** The forged tools the caller sees, by wire name. */
  views(): Promise<Map<string, ToolView>>;
  /** The caller's skills (skills.ts): each SKILL.md is listed, each file is read here. */
  skills(): Promise<SkillSet>;
}

const TOOL_URI = 'forge://tools/';
export const AUDIT_TAIL_URI = 'forge://audit/tail';
const MAX_COMPLETIONS = 100;
/** Most resource subscriptions one 2025-era session holds. */
const MAX_SUBSCRIPTIONS = 1000;

const TEMPLATES: ResourceTemplateType[] = [
  {
    uriTemplate: 'forge://tools/{name}',
    name: 'tool',
    title: 'A forged tool',
    description: 'The stored spec of a forged tool you can call (forge name or wire name): schemas, program, version, digest, scope.',
    mimeType: 'application/json',
  },
  ...RUN_TEMPLATES,
];

/** Registers prompts/*, completion/complete and resources/* on `server`. */
export function addSurface(server: Server, deps: SurfaceDeps): { subscribed(): ReadonlySet<string> } {
  const subscriptions = new Set<string>();

  server.setRequestHandler('prompts/list', async () => ({ prompts: [...PROMPTS] }));
  server.setRequestHandler('prompts/get', async (request) => {
    const got = getPrompt(request.params.name, request.params.arguments ?? {});
    if (typeof got === 'string') throw new ProtocolError(ProtocolErrorCode.InvalidParams, got);
    return got;
  });

  server.setRequestHandler('completion/complete', async (request) => {
    const { ref, argument } = request.params;
    let values: string[] = [];
    if (ref.type === 'ref/prompt') values = completePromptArgument(ref.name, argument.name, argument.value);
    else if (ref.type === 'ref/resource' && ref.uri === 'forge://tools/{name}' && argument.name === 'name') {
      const names = [...(await deps.views()).values()].map((v) => v.record.name).sort();
      values = names.filter((n) => n.startsWith(argument.value));
    } else if (ref.type === 'ref/resource' && argument.name === 'scope') values = SCOPES.filter((s) => s.startsWith(argument.value));
    return {
      completion: { values: values.slice(0, MAX_COMPLETIONS), total: values.length, hasMore: values.length > MAX_COMPLETIONS },
    };
  });

  server.setRequestHandler('resources/list', async () => {
    const resources: Resource[] = [];
    for (const v of (await deps.views()).values())
      resources.push({
        uri: `${TOOL_URI}${v.record.name}`,
        name: v.tool.name,
        title: v.record.name,
        description: `The spec of forged tool ${v.record.name} (${v.record.scope} scope, v${v.record.version})`,
        mimeType: 'application/json',
      });
    resources.push({
      uri: AUDIT_TAIL_URI,
      name: 'audit_tail',
      title: 'Audit log tail',
      description: 'The last entries of the audit log, after the whole chain was verified (the verdict comes with them).',
      mimeType: 'application/json',
    });
    resources.push(...(await deps.skills()).listed());
    return { resources };
  });
  server.setRequestHandler('resources/templates/list', async () => ({ resourceTemplates: TEMPLATES }));

  server.setRequestHandler('resources/read', async (request): Promise<ReadResourceResult> => {
    const uri = request.params.uri;
    if (uri.startsWith(TOOL_URI)) {
      const name = decodeURIComponent(uri.slice(TOOL_URI.length));
      const views = await deps.views();
      const view = findView(views, name);
      if (!view) throw new ResourceNotFoundError(uri, `no tool "${name}" that you can call (forge_list lists them)`);
      return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify(view.record, null, 2) }] };
    }
    if (uri === AUDIT_TAIL_URI) {
      const forge = await deps.ready();
      const tail = await forge.auditTail({ ...deps.ctx, last: 50 });
      if (!tail.ok) throw new ProtocolError(ProtocolErrorCode.InvalidParams, `${tail.kind}: ${tail.message}`);
      return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify(tail, null, 2) }] };
    }
    if (uri.startsWith('forge://runs/')) return readRunResource(await deps.ready(), uri, deps.ctx);
    if (uri.startsWith('skill://')) return readSkillFile(deps.skills, uri);
    throw new ResourceNotFoundError(uri, `forge has no resource ${uri} (resources/list and resources/templates/list name them)`);
  });

  // 2025 era: per-resource subscriptions (2026 clients subscribe on their listen stream).
  server.setRequestHandler('resources/subscribe', async (request) => {
    if (!subscriptions.has(request.params.uri) && subscriptions.size >= MAX_SUBSCRIPTIONS)
      throw new ProtocolError(
        ProtocolErrorCode.InvalidParams,
        `this session already holds ${MAX_SUBSCRIPTIONS} resource subscriptions: unsubscribe from some first`,
      );
    subscriptions.add(request.params.uri);
    return {};
  });
  server.setRequestHandler('resources/unsubscribe', async (request) => {
    subscriptions.delete(request.params.uri);
    return {};
  });
  return { subscribed: () => subscriptions };
}
