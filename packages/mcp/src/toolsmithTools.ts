/**
 * The toolsmith's two meta-tools, `forge_request` and `forge_propose`: their MCP definitions,
 * when they are listed, and how a call goes to the toolsmith the app attached. This package
 * does not depend on @forge/toolsmith: {@link ToolsmithSurface} is the part of it the server uses.
 */
import type { CallContext, Envelope, Refusal } from '@forge/runner';
import type { Tool } from '@modelcontextprotocol/server';

/** Where the toolsmith stands for one persona (policy `toolsmith`). */
export interface ToolsmithSurfaceStatus {
  /** Policy `toolsmith.enabled`: the master switch. */
  enabled: boolean;
  /** The kill switch (or a policy file that failed to reload): every step is refused. */
  paused: boolean;
  pausedWhy?: string;
  /** `governed`: new tools come through `forge_propose` and an approver; `forge_tool` is refused. */
  mode: 'direct' | 'governed';
  /**
   * May this persona approve through its MCP client (policy `toolsmith.approve_in_client`, and it
   * is in `toolsmith.approvers` and `operator_personas`)? Absent means no.
   */
  approvesInClient?: boolean;
}

/** One check of a proposal's validation, as the toolsmith records it. */
export interface ToolsmithSurfaceCheck {
  kind: string;
  label: string;
  ok: boolean;
  verdict: string;
  input?: unknown;
  expect?: unknown;
}

/** The toolsmith's answer to `forge_request`. */
export interface ToolsmithRequestAnswer {
  ok: true;
  /** The capability as forge normalised it. */
  capability: string;
  /** May a proposal for it be authored under policy `toolsmith.capability_allow`? */
  authorable: boolean;
  /** How often it was asked for inside the window, and whether that makes it wanted. */
  gap: { count: number; qualifies: boolean };
  message: string;
}

/** The toolsmith's answer to `forge_propose`: the proposal as stored, validated or failed. */
export interface ToolsmithProposeAnswer {
  ok: true;
  proposal: {
    id: string;
    state: string;
    /** The tool name forge derived. */
    name: string;
    capability: string;
    validation?: {
      ok: boolean;
      summary: string;
      sandbox_runs: number;
      duration_ms: number;
      checks: readonly ToolsmithSurfaceCheck[];
    };
  };
  /** Blueprint fields forge did not take (a suggested name, sandbox, network, secrets). */
  ignored: readonly string[];
  message: string;
}

/** The toolsmith's reviewable summary of one proposal (`forge toolsmith show`), as far as `forge_approve` shows it. */
export interface ToolsmithSurfaceReview {
  ok: true;
  proposal: {
    id: string;
    state: string;
    name: string;
    capability: string;
    /** The persona that proposed it (it may not approve it). */
    persona: string;
    spec: { description?: string; input_schema?: unknown; impl: string; runtime: string };
    validation?: { ok: boolean; summary: string; sandbox_runs: number; spec_digest?: string };
  };
  /** The live tool of that name, if any. */
  active?: { version: number };
  /** A line diff of the impl against the live version (empty when there is none). */
  impl_diff: string;
}

/** The toolsmith's answer to an approval: the proposal now active and the tool that went live. */
export interface ToolsmithApproveAnswer {
  ok: true;
  proposal: { id: string; state: string; name: string };
  tool: { version: number };
  /** Whether validation ran again (the policy or runtime changed since). */
  revalidated: boolean;
}

/**
 * What an MCP server needs of a toolsmith (`createToolsmith` of @forge/toolsmith is one): the
 * app composes the two and passes it as `ForgeMcpServerOptions.toolsmith`. Expected failures are
 * refusals `{ok: false, kind, message}`; the server passes them to the client as error results.
 */
export interface ToolsmithSurface {
  /** Where the toolsmith stands for `persona` now (re-read from policy at every call). */
  status(persona: string): ToolsmithSurfaceStatus;
  /** `forge_request {capability, description, example_inputs?}`: records the need. */
  request(args: unknown, ctx: CallContext): Promise<ToolsmithRequestAnswer | Refusal>;
  /** `forge_propose {…}`: stores the blueprint as a proposal and validates it at once. */
  propose(args: unknown, ctx: CallContext): Promise<ToolsmithProposeAnswer | Refusal>;
  /** The reviewable summary of proposal `id` (for `forge_approve`; without it and `approve`, nothing is approved in the client). */
  show?(id: string): Promise<ToolsmithSurfaceReview | Refusal>;
  /** Approves proposal `id` as operator `by`, with every check of the toolsmith (for `forge_approve`). */
  approve?(id: string, op: { by: string; via?: 'cli' | 'client' }): Promise<ToolsmithApproveAnswer | Refusal>;
}

const CAPABILITY = {
  type: 'string',
  description:
    'What the tool does, as a dotted lower-case name: area.verb_object, e.g. "text.word_count" or "csv.filter_rows". forge derives the tool name from it (and your namespace).',
  maxLength: 200,
} as const;

const FORGE_REQUEST: Tool = {
  name: 'forge_request',
  title: 'Ask for a tool',
  description: [
    'Ask for a tool that does not exist yet: the capability you need and what it should do, with example inputs if you have them. forge records the need; once agents asked for a capability often enough it is wanted, and a tool for it can be written with forge_propose (by you now, or later).',
    'The answer says whether that capability may be authored in this project (policy toolsmith.capability_allow), how often it was asked for, and whether it is wanted. Nothing becomes callable from a request alone.',
  ].join('\n\n'),
  inputSchema: {
    type: 'object',
    properties: {
      capability: CAPABILITY,
      description: { type: 'string', maxLength: 1000, description: 'What the tool should do and return.' },
      example_inputs: {
        type: 'array',
        maxItems: 5,
        items: { type: 'object' },
        description: 'Up to 5 inputs the tool would be called with.',
      },
    },
    required: ['capability', 'description'],
    additionalProperties: false,
  },
  annotations: { title: 'Ask for a tool', readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
};

const FORGE_PROPOSE: Tool = {
  name: 'forge_propose',
  title: 'Propose a tool',
  description: [
    'Propose a new tool: a blueprint (capability, description, JSON Schema of its input, a short python3/node/bash/sh program, examples). It does not go live by itself: forge validates it at once, and it becomes callable only after a person approves it.',
    'Validation runs in the sandbox before the answer: a static check, every example (compared with its expect), probes generated from input_schema (valid inputs must give a well-formed envelope that matches output_schema; invalid ones must be refused by the schema before anything runs), a determinism check when deterministic, and the examples of the version it replaces. The answer is ok with state "validated" (it waits for an approver) or state "failed" with the failing checks and their verdicts: fix the blueprint and propose again.',
    'forge derives the tool name from the capability and your namespace (a name you suggest is not taken); sandbox, network and secrets come from policy, never from the blueprint (fields that ask for them are listed as ignored). Once approved, the tool appears in tools/list (you get list_changed) and is called like any other.',
    'The program reads its input as one JSON object on stdin and prints exactly one JSON envelope on stdout: {"ok": true, "data": ...} or {"ok": false, "error": {"kind": "...", "message": "..."}}.',
  ].join('\n\n'),
  inputSchema: {
    type: 'object',
    properties: {
      capability: CAPABILITY,
      gap: {
        type: 'string',
        description: 'Instead of capability: the wanted gap this answers, as forge named it (e.g. "text.word_count").',
      },
      description: {
        type: 'string',
        maxLength: 2000,
        description: 'What the tool does and what it returns, for the agents that will call it.',
      },
      input_schema: {
        type: 'object',
        description:
          'JSON Schema (2020-12; draft-07 accepted) of the input object; give each property its type and bounds (minimum, maxLength, enum…): probes are generated from them.',
      },
      output_schema: { type: 'object', description: 'Optional JSON Schema of "data"; every valid probe must match it.' },
      impl: { type: 'string', description: 'The program source: reads JSON on stdin, prints one envelope on stdout.' },
      runtime: {
        type: 'string',
        description: 'python3, node, bash or sh (as policy allows).',
        examples: ['python3', 'node', 'bash', 'sh'],
      },
      examples: {
        type: 'array',
        minItems: 1,
        maxItems: 20,
        description:
          'Sample calls [{input, expect?}], each run in the sandbox. expect is the data an ok answer must have, or an envelope subset such as {"ok": false, "error": {"kind": "..."}}; without it the run must be ok.',
        items: { type: 'object', properties: { input: { type: 'object' }, expect: {} }, required: ['input'] },
      },
      deterministic: { type: 'boolean', description: 'Same input, same output (checked by running twice; results are then cached).' },
      meta: {
        type: 'object',
        description: 'Budget requests and hints (timeout_ms, cpu_s, output_cap, annotations); policy clamps them. secrets are not taken.',
      },
    },
    required: ['description', 'input_schema', 'impl', 'runtime', 'examples'],
  },
  annotations: { title: 'Propose a tool', readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
};

/** The toolsmith's meta-tools as MCP tool definitions. */
export const TOOLSMITH_TOOL_DEFINITIONS: readonly Tool[] = Object.freeze([FORGE_REQUEST, FORGE_PROPOSE]);

/** True for `forge_request` and `forge_propose`. */
export function isToolsmithTool(name: string): boolean {
  return name === 'forge_request' || name === 'forge_propose';
}

/** What the listing offers `persona` given its toolsmith status (undefined: no toolsmith attached). */
export interface ToolsmithListing {
  /** List forge_request and forge_propose. */
  propose: boolean;
  /** List forge_approve, if the client can also ask its user (policy approve_in_client for this persona). */
  approve: boolean;
  /** Leave forge_tool out (governed mode: the runner refuses it). */
  hideForgeTool: boolean;
  /** A part of the listing signature, so a change of either is list_changed. */
  key: string;
}

/** How the toolsmith shapes the listing for `persona`; a status that cannot be read lists nothing of it and hides forge_tool. */
export function toolsmithListing(smith: ToolsmithSurface | undefined, persona: string): ToolsmithListing {
  if (!smith) return { propose: false, approve: false, hideForgeTool: false, key: '' };
  let s: ToolsmithSurfaceStatus;
  try {
    s = smith.status(persona);
  } catch {
    // Fail closed: nothing offered that might not be governed.
    return { propose: false, approve: false, hideForgeTool: true, key: 'smith:unreadable\n' };
  }
  const propose = s.enabled === true;
  const hideForgeTool = s.mode !== 'direct';
  const approve = propose && s.approvesInClient === true && smith.show !== undefined && smith.approve !== undefined;
  return {
    propose,
    approve,
    hideForgeTool,
    key: `smith:${propose ? 'on' : 'off'}:${hideForgeTool ? 'governed' : 'direct'}${approve ? ':approves' : ''}\n`,
  };
}

/** Failing checks an answer shows at most (the full record is the operator's, `forge toolsmith show`). */
const MAX_FAILED_CHECKS = 10;

const fromRefusal = (r: Refusal): Envelope => {
  const { ok: _ok, kind, message, ...detail } = r;
  return { ok: false, error: { kind, message, ...detail }, meta: {} };
};

/**
 * Runs `forge_request` or `forge_propose` on `smith` for `ctx`. A refusal (the toolsmith off or
 * paused, a capability policy does not allow, a malformed blueprint) is an error envelope; a
 * proposal that failed validation is an ok answer with `state: "failed"` and the failing checks
 * (the call did what it should: the agent reads why and proposes again).
 */
export async function runToolsmithTool(smith: ToolsmithSurface, name: string, args: unknown, ctx: CallContext): Promise<Envelope> {
  if (name === 'forge_request') {
    const r = await smith.request(args, ctx);
    if (!r.ok) return fromRefusal(r);
    return {
      ok: true,
      data: {
        capability: r.capability,
        authorable: r.authorable,
        requests_in_window: r.gap.count,
        wanted: r.gap.qualifies,
        message: r.message,
      },
      meta: {},
    };
  }
  if (name !== 'forge_propose') throw new Error(`not a toolsmith tool: ${name}`);
  const r = await smith.propose(args, ctx);
  if (!r.ok) return fromRefusal(r);
  const p = r.proposal;
  const v = p.validation;
  const failed = v ? v.checks.filter((c) => !c.ok) : [];
  return {
    ok: true,
    data: {
      id: p.id,
      state: p.state,
      name: p.name,
      capability: p.capability,
      ...(v
        ? {
            validation: {
              ok: v.ok,
              summary: v.summary,
              checks: v.checks.length,
              sandbox_runs: v.sandbox_runs,
              duration_ms: v.duration_ms,
              ...(failed.length > 0
                ? {
                    failed: failed.slice(0, MAX_FAILED_CHECKS).map((c) => ({
                      kind: c.kind,
                      label: c.label,
                      verdict: c.verdict,
                      ...(c.input !== undefined ? { input: c.input } : {}),
                      ...(c.expect !== undefined ? { expect: c.expect } : {}),
                    })),
                    ...(failed.length > MAX_FAILED_CHECKS ? { more_failed: failed.length - MAX_FAILED_CHECKS } : {}),
                  }
                : {}),
            },
          }
        : {}),
      ...(r.ignored.length > 0 ? { ignored: [...r.ignored] } : {}),
      message: r.message,
    },
    meta: {},
  };
}
