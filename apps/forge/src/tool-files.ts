import { inertJson, inertText } from '@forge/registry/inert';
import type { ToolCard } from '@forge/runner';
import { type CallRow, formatRow } from './tool-log.js';

/**
 * What `forge tools export` writes for one tool (the CortexFS tool ABI): the executable and the
 * files of its control directory. Pure: the same card and launcher give the same bytes, so an
 * export rewrites only what changed. Agent- and upstream-written text (descriptions, schemas) is
 * made inert as every human-facing output is: `cat` of a control file cannot drive a terminal.
 */

/** How an exported executable starts forge: the node binary, the CLI script, the home and project. */
export interface Launcher {
  node: string;
  cli: string;
  home: string;
  project: string;
}

/** The control files every tool has, in the order `ls` shows them (output_schema only when declared). */
export const CONTROL_FILES = ['cap', 'description', 'log', 'name', 'origin', 'output_schema', 'policy', 'schema', 'status'] as const;

/** The files of `card`'s control directory, by name; `calls` are its latest calls, oldest first. */
export function controlFiles(card: ToolCard, calls: readonly CallRow[] = []): Record<string, string> {
  const last = calls.at(-1);
  const json = (v: unknown) => `${inertJson(JSON.stringify(v, null, 2))}\n`;
  const origin =
    card.origin.kind === 'forged'
      ? { kind: 'forged', scope: card.origin.scope, forged_by: card.origin.forgedBy }
      : {
          kind: card.origin.source,
          server: card.origin.server,
          tool: card.origin.tool,
          transport: card.origin.transport,
          sandboxed: card.origin.sandboxed,
        };
  const files: Record<string, string> = {
    name: `${card.name}\n`,
    description: `${inertText(card.description)}\n`,
    schema: json(card.inputSchema),
    cap: json({
      ...(card.cap.runtime !== undefined ? { runtime: card.cap.runtime } : {}),
      sandboxed: card.cap.sandboxed,
      binds: card.cap.binds,
      bind_roots: card.cap.bindRoots,
      network: card.cap.network,
      secrets: card.cap.secrets,
      limits: card.cap.limits,
      ...(card.cap.clamped.length > 0 ? { clamped: card.cap.clamped } : {}),
    }),
    policy: json({
      persona: card.policy.persona,
      allowed: card.policy.allowed,
      gates: card.policy.gates,
      breakers: card.policy.breakers,
      policy_digest: card.policy.digest,
      sources: card.policy.sources,
      hooks: card.policy.hooks,
    }),
    status: json({
      state: card.status.state,
      ...(card.status.version !== undefined ? { version: card.status.version } : {}),
      digest: card.status.digest,
      wire_name: card.wireName,
      ...(card.origin.kind === 'forged' ? { scope: card.origin.scope } : {}),
      last_call: last
        ? {
            at: last.ts,
            persona: last.persona,
            outcome: last.outcome,
            ...(last.run_id ? { run_id: last.run_id } : {}),
            audit_seq: last.seq,
          }
        : null,
    }),
    log: inertText(calls.map((r) => `${formatRow(r)}\n`).join('')),
    origin: json(origin),
  };
  if (card.outputSchema !== undefined) files.output_schema = json(card.outputSchema);
  return files;
}

/** How the second line of the launcher of `name` begins: what says a file is an export's. */
export function launcherMark(name: string): string {
  return `# forge tool ${name}:`;
}

/** `s` as one single-quoted word of a POSIX shell. */
export function shellWord(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/**
 * The executable `DIR/<name>`: a shell script that runs `forge run` on the tool with its own
 * arguments and stdin, as whoever runs it (the directory grants nothing: every gate applies to
 * that caller). The tool path is cleared so the name is not looked up again.
 */
export function launcherScript(name: string, l: Launcher): string {
  return [
    '#!/bin/sh',
    `${launcherMark(name)} written by \`forge tools export\`, rewritten by the next export (do not edit).`,
    '# It calls the tool through forge as whoever runs it: policy, schema, sandbox and audit all apply.',
    `FORGE_TOOL_PATH= exec ${shellWord(l.node)} ${shellWord(l.cli)} run --home ${shellWord(l.home)} --project ${shellWord(l.project)} -- ${shellWord(name)} "$@"`,
    '',
  ].join('\n');
}
