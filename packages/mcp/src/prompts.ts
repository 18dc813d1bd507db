/**
 * forge's prompts: the agent-facing guide (when to forge, when to call an existing tool, when
 * not to forge) and a prompt that drafts a tool spec from a description. Both are plain text the
 * client shows its user or its model; neither runs anything.
 */
import type { GetPromptResult, Prompt } from '@modelcontextprotocol/server';

/** The scopes a forged tool can live in, narrowest first. */
export const SCOPES = ['task', 'session', 'project', 'user'] as const;
/** The runtimes forge knows (a versioned alias such as python3.11 resolves when installed). */
export const RUNTIMES = ['python3', 'node', 'bash', 'sh'] as const;

export const PROMPTS: readonly Prompt[] = Object.freeze([
  {
    name: 'forge_guide',
    title: 'When to forge a tool',
    description: 'The rules an agent follows to decide between forging a tool, calling an existing one, and not using forge at all.',
  },
  {
    name: 'forge_draft_tool',
    title: 'Draft a tool spec',
    description:
      'Asks the model to draft a forge_tool spec (name, schemas, program, examples) from a description of what the tool should do.',
    arguments: [
      { name: 'description', description: 'What the tool should do, its inputs and what it returns.', required: true },
      { name: 'runtime', description: `The program's runtime: ${RUNTIMES.join(', ')} (default python3).`, required: false },
      { name: 'scope', description: `Where the tool lives: ${SCOPES.join(', ')} (default project).`, required: false },
    ],
  },
]);

/** The agent guide: the `forge_guide` prompt, and the body of the `forging` skill (skills.ts). */
export const GUIDE = `# forge: when to forge a tool

forge creates tools at runtime. A forged tool is validated against its schema on every call, runs in a sandbox that sees only the paths its input names (no network unless policy grants it), and every call is written to a tamper-evident audit log.

## Forge a tool (forge_tool) when
- you are about to write the same snippet a second or third time with different parameters (paths, columns, thresholds);
- the answer needs exact numbers computed over data (counts, sums, statistics, parsing, filtering) rather than estimates;
- the result must be written to a file (CSV, JSON, PNG) or be reproducible ("deterministic", "save as", "compute exactly", "audit trail");
- a computed result will be reused later: a deterministic tool's results are cached.

## Call an existing tool instead
- Run forge_list first. When a tool already does the job, call it (by name in tools/list, or through forge_call) instead of forging a near-copy.
- A tool that almost fits: forge a new version with overwrite: true only when you own it; otherwise forge one with a new name.

## Do not forge
- one-off shell commands (\`wc -l\`, \`git status\`);
- language work: summarising, rewriting, translating, reviewing, explaining;
- data that lives only in this conversation: answer directly.

## How a tool is written
- The program reads its input as one JSON object on stdin and prints exactly one JSON envelope on stdout: {"ok": true, "data": …} or {"ok": false, "error": {"kind": "…", "message": "…"}}.
- A string input naming a host file or directory carries "x-bind": "ro" or "rw" in its schema; only those paths are mounted.
- Files written to /forge/artifacts and named in meta.files come back as links (images also inline).
- Progress and log lines may be written as JSON to the descriptor named by FORGE_EVENTS_FD.
- Mark a tool deterministic ("meta": {"deterministic": true}) only when the same input always gives the same output.

These are guidelines, not gates: decide per call.`;

/** What each forge_tool argument holds, as a Markdown list (`runtime` and `scope` as given, or as placeholders). */
export function specFields(runtime: string, scope: string): string {
  return `- name: 1-64 of [A-Za-z0-9_.-], starting with a letter; dots make namespaces (code.csv_stats). Call forge_list first: reuse a tool that already does this.
- description: what it does and what it returns, for the agents that will call it.
- runtime: ${runtime}
- scope: ${scope}
- input_schema: a JSON Schema object of the input; every property typed and described; required inputs listed; "x-bind": "ro" (or "rw") on string properties that name host paths.
- output_schema: a JSON Schema of "data".
- impl: a short ${runtime} program that reads one JSON object from stdin and prints exactly one envelope: {"ok": true, "data": …} or {"ok": false, "error": {"kind": "…", "message": "…"}}. No network, no paths but those bound.
- meta: {"deterministic": true} only when the same input always gives the same output.
- examples: two or three [{"input": …, "expect": …}] that show typical use.`;
}

/** The text of prompt `name` with its arguments, or undefined for a name forge does not have. */
export function getPrompt(name: string, args: Record<string, string> = {}): GetPromptResult | string {
  if (name === 'forge_guide') {
    return { description: PROMPTS[0]?.description, messages: [{ role: 'user', content: { type: 'text', text: GUIDE } }] };
  }
  if (name === 'forge_draft_tool') {
    const description = args.description?.trim();
    if (!description) return 'prompt forge_draft_tool needs the argument "description": what the tool should do';
    const runtime = args.runtime?.trim() || 'python3';
    if (!RUNTIMES.some((r) => runtime === r || runtime.startsWith(`${r}.`)))
      return `prompt forge_draft_tool: runtime "${runtime}" is not one of ${RUNTIMES.join(', ')} (or a versioned alias like python3.11)`;
    const scope = args.scope?.trim() || 'project';
    if (!(SCOPES as readonly string[]).includes(scope))
      return `prompt forge_draft_tool: scope "${scope}" is not one of ${SCOPES.join(', ')}`;
    const text = `Draft a forge tool and create it with forge_tool.

What it should do:
${description}

Write the forge_tool arguments:
${specFields(runtime, scope)}`;
    return { description: PROMPTS[1]?.description, messages: [{ role: 'user', content: { type: 'text', text } }] };
  }
  return `forge has no prompt named "${name}" (it has ${PROMPTS.map((p) => p.name).join(', ')})`;
}

/** Completion values for a prompt argument: runtimes and scopes starting with `value`. */
export function completePromptArgument(prompt: string, argument: string, value: string): string[] {
  if (prompt !== 'forge_draft_tool') return [];
  const from = argument === 'runtime' ? RUNTIMES : argument === 'scope' ? SCOPES : [];
  return from.filter((v) => v.startsWith(value));
}
