import { FLAG_ENV } from './args.js';
import type { Command } from './command.js';
import { VERSION } from './version.js';

const GLOBAL_LINES = [
  '--json               machine-readable output on stdout',
  '--home DIR           forge home (FORGE_HOME; default $XDG_CONFIG_HOME/forge or ~/.config/forge)',
  '--project DIR        project directory (default: nearest ancestor with .forge/ or .git, else cwd)',
  ...Object.entries(FLAG_ENV)
    .filter(([f]) => f !== 'home')
    .map(([flag, env]) => `${`--${flag} V`.padEnd(21)}sets ${env}`),
  '-h, --help           this help',
];

export function globalHelp(commands: readonly Command[]): string {
  const width = Math.max(...commands.map((c) => c.words.length)) + 2;
  return [
    `forge ${VERSION} — tools that AI agents create at runtime: schema-bound, sandboxed, audited`,
    '',
    'usage: forge <command> [options]',
    '',
    'commands:',
    ...commands.map((c) => `  ${c.words.padEnd(width)}${c.summary}`),
    '',
    'options of every command:',
    ...GLOBAL_LINES.map((l) => `  ${l}`),
    '',
    'exit codes: 0 ok, 1 refused or the tool failed (the result is still printed), 2 usage or environment error',
    'forge <command> --help shows one command. Start with: forge demo',
  ].join('\n');
}

export function groupHelp(group: string, commands: readonly Command[]): string {
  const mine = commands.filter((c) => c.words.startsWith(`${group} `));
  return [`usage: forge ${group} <command>`, '', ...mine.map((c) => `  ${c.usage}\n      ${c.summary}`)].join('\n');
}

export function commandHelp(c: Command): string {
  return [
    `usage: ${c.usage}`,
    '',
    c.summary,
    ...(c.details?.length ? ['', ...c.details.map((d) => `  ${d}`)] : []),
    '',
    'options of every command:',
    ...GLOBAL_LINES.map((l) => `  ${l}`),
  ].join('\n');
}
