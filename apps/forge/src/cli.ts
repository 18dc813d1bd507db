import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { EnvironmentError, type Parsed, parseCommand, UsageError } from './args.js';
import type { Command, Io } from './command.js';
import { auditAnchor, auditExport, auditTail, auditVerify } from './commands/audit.js';
import { auditConsistency } from './commands/audit-consistency.js';
import { auditProve } from './commands/audit-prove.js';
import { auditWitness } from './commands/audit-witness.js';
import { consoleCommand } from './commands/console.js';
import { demo } from './commands/demo.js';
import { doctor } from './commands/doctor.js';
import { toolsExport, toolsLog } from './commands/export.js';
import { GATEWAY_COMMANDS } from './commands/gateway.js';
import { policyCheck } from './commands/policy.js';
import { run } from './commands/run.js';
import { serve } from './commands/serve.js';
import { status } from './commands/status.js';
import { toolsCall, toolsForge, toolsList, toolsPromote, toolsRemove, toolsShow } from './commands/tools.js';
import { TOOLSMITH_COMMANDS } from './commands/toolsmith.js';
import { witnessServe } from './commands/witness.js';
import { worker } from './commands/worker.js';
import { commandHelp, globalHelp, groupHelp } from './help.js';
import { createOutput } from './output.js';
import { readStdin } from './spec-input.js';
import { startTelemetry } from './telemetry.js';
import { VERSION } from './version.js';
import { where } from './where.js';

export const COMMANDS: readonly Command[] = [
  serve,
  worker,
  toolsList,
  toolsShow,
  toolsForge,
  toolsCall,
  toolsPromote,
  toolsRemove,
  toolsExport,
  toolsLog,
  run,
  auditVerify,
  auditTail,
  auditExport,
  auditAnchor,
  auditProve,
  auditConsistency,
  auditWitness,
  witnessServe,
  policyCheck,
  ...GATEWAY_COMMANDS,
  ...TOOLSMITH_COMMANDS,
  consoleCommand,
  doctor,
  status,
  demo,
];

/** Finds the command named by the first one or two words of `argv`. */
function findCommand(argv: readonly string[]): { command?: Command; rest: string[]; group?: string } {
  const [a, b] = argv;
  const two = COMMANDS.find((c) => c.words === `${a} ${b}`);
  if (two) return { command: two, rest: argv.slice(2) };
  const one = COMMANDS.find((c) => c.words === a);
  if (one) return { command: one, rest: argv.slice(1) };
  const isGroup = COMMANDS.some((c) => c.words.startsWith(`${a} `));
  return { rest: argv.slice(isGroup ? 1 : 0), ...(isGroup ? { group: a } : {}) };
}

/** Runs the CLI on `argv` (without node and the script); resolves to the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const json = argv.includes('--json');
  const out = createOutput({ json });
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help') {
    out.line(globalHelp(COMMANDS));
    return argv.length === 0 ? 2 : 0;
  }
  if (argv[0] === '--version' || argv[0] === '-V') {
    if (json) out.data({ version: VERSION });
    else out.line(VERSION);
    return 0;
  }
  const { command, rest, group } = findCommand(argv);
  try {
    if (!command) {
      if (group && (rest.length === 0 || rest[0] === '--help' || rest[0] === '-h')) {
        out.line(groupHelp(group, COMMANDS));
        return rest.length === 0 ? 2 : 0;
      }
      const what = group ? `unknown command "forge ${group} ${rest[0]}"` : `unknown command "${argv[0]}"`;
      throw new UsageError(
        what,
        group
          ? `forge ${group} <${COMMANDS.filter((c) => c.words.startsWith(`${group} `))
              .map((c) => c.words.split(' ')[1])
              .join('|')}>`
          : 'forge <command> (forge --help lists them)',
      );
    }
    const parsed: Parsed = parseCommand(command, rest);
    if (parsed.values.help) {
      out.line(commandHelp(command));
      return 0;
    }
    let input: Promise<string> | undefined;
    const io: Io = {
      out,
      where: () => where(parsed.values),
      stdin: () => (input ??= readStdin()),
      cliPath: selfPath(),
    };
    return await command.run(parsed, io);
  } catch (err) {
    if (err instanceof UsageError || err instanceof EnvironmentError) {
      if (json) out.data({ ok: false, kind: err instanceof UsageError ? 'usage' : 'environment', message: err.message });
      out.note(`forge: ${err.message}`);
      if (err instanceof UsageError && err.usage) out.note(`usage: ${err.usage}`);
      return 2;
    }
    out.note(`forge: internal error: ${(err as Error).stack ?? err}`);
    return 2;
  }
}

/** This script's own path, for commands that start `forge serve` as a child. */
function selfPath(): string {
  const p = fileURLToPath(import.meta.url);
  try {
    return realpathSync(p);
  } catch {
    return p;
  }
}

// OpenTelemetry when OTEL_* asks for it (telemetry.ts); its last spans are exported before the exit.
const telemetry = await startTelemetry(process.env);
const code = await main(process.argv.slice(2));
await telemetry?.shutdown();
// Let stdout drain (it may be a pipe) before exiting; an exit also ends watchers and timers left by a library.
// A stdout whose reader has gone (`| head -1`) has nothing left to drain.
if (process.stdout.destroyed) process.exit(code);
else process.stdout.write('', () => process.exit(code));
