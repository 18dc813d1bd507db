#!/usr/bin/env node
// prepublishOnly guard: the packages are named @forge/*, but on the public npm registry the
// @forge scope belongs to an unrelated project. Refuse to publish under that scope to the public
// registry; a publisher first renames the packages to a scope they own (see README "Publishing").
//
// The registry is the one the publishing tool will actually use, asked of the tool itself: the
// guard re-runs the same publish as a dry run without scripts and reads where it says it would
// go. Reading the environment is not enough: pnpm 12 hands a lifecycle script no `--registry`
// flag and no `npm_config_registry` of its own, yet publishes to the public registry when only
// `npm_config_registry` is set (it reads `pnpm_config_*`), and it ranks `publishConfig.registry`
// over a scoped `@forge:registry` over `--registry` over `.npmrc`'s `registry`. Whatever cannot be
// determined is refused: the guard fails closed.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { basename } from 'node:path';

const PUBLIC = new Set(['registry.npmjs.org', 'registry.npmjs.com', 'registry.yarnpkg.com']);
const HINT =
  'Rename the packages to a scope you own first (README.md, "Publishing"), or publish to a private registry\n' +
  '(--registry <url>, publishConfig.registry, or "@forge:registry=<url>" in .npmrc).';

const pkg = JSON.parse(readFileSync('package.json', 'utf8'));
if (!pkg.name.startsWith('@forge/')) process.exit(0);

const found = publishTarget(pkg);
if (!found.ok) refuse(`refusing to publish ${pkg.name}: ${found.message}`);
if (isPublic(found.registry)) {
  refuse(`refusing to publish ${pkg.name} to ${found.registry}: the @forge scope on the public registry belongs to another project.`);
}

function refuse(message) {
  console.error(`${message}\n${HINT}`);
  process.exit(1);
}

/** Whether `url` names the public npm registry (or a host that forwards publishes to it). */
function isPublic(url) {
  try {
    return PUBLIC.has(new URL(url).hostname.toLowerCase());
  } catch {
    return true; // not a URL: nothing says it is private
  }
}

/**
 * Where the tool running this script would publish `pkg`: `{ ok: true, registry }`, or
 * `{ ok: false, message }` saying why it cannot be told.
 */
function publishTarget(pkg) {
  const agent = process.env.npm_config_user_agent ?? '';
  const tool = process.env.npm_execpath;
  if (!tool) return { ok: false, message: 'npm_execpath is not set, so the publishing tool is unknown; publish with pnpm or npm' };
  if (agent.startsWith('pnpm/')) return pnpmTarget(pkg, tool);
  if (agent.startsWith('npm/')) return npmTarget(pkg, tool);
  return {
    ok: false,
    message: `cannot tell which registry "${agent.split(' ')[0] || 'an unknown tool'}" publishes to; publish with pnpm or npm`,
  };
}

/** pnpm: the same publish, as a dry run without scripts, with the registry options of the running one. */
function pnpmTarget(pkg, pnpm) {
  const parent = publishingProcess();
  if (!parent.ok) return parent;
  const args = [
    'publish',
    '--dry-run',
    '--ignore-scripts',
    '--no-git-checks',
    '--reporter',
    'append-only',
    ...registryOptions(parent.argv),
  ];
  const r = run(pnpm, args);
  if (!r.ok) return r;
  // "📦 @forge/audit-chain@0.1.0 → https://registry.npmjs.org/"
  const at = `${pkg.name}@${pkg.version}`;
  const line = r.output.split('\n').find((l) => l.includes(` ${at} → `));
  const registry = line?.slice(line.indexOf(' → ') + 3).trim();
  if (!registry) return { ok: false, message: `"pnpm ${args.join(' ')}" did not say where ${at} would go:\n${r.output.trim()}` };
  return { ok: true, registry };
}

/** npm hands its whole configuration to scripts as npm_config_*: its own dry run sees the same. */
function npmTarget(pkg, npm) {
  // No retries: npm's dry run checks the login, and retrying an unreachable registry takes a minute.
  const args = ['publish', '--dry-run', '--ignore-scripts', '--fetch-retries=0', '--fetch-timeout=10000'];
  const r = run(npm.endsWith('.js') ? process.execPath : npm, npm.endsWith('.js') ? [npm, ...args] : args);
  if (!r.ok) return r;
  // "npm notice Publishing to https://registry.npmjs.org/ with tag latest and public access (dry-run)"
  const registry = /Publishing to (\S+)/.exec(r.output)?.[1];
  if (!registry) return { ok: false, message: `"npm ${args.join(' ')}" did not say where ${pkg.name} would go:\n${r.output.trim()}` };
  return { ok: true, registry };
}

function run(file, args) {
  const r = spawnSync(file, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 120_000 });
  const output = `${r.stdout ?? ''}\n${r.stderr ?? ''}`;
  if (r.error || r.status !== 0) {
    return {
      ok: false,
      message: `asking "${basename(file)} ${args.join(' ')}" where it would publish failed (${r.error?.message ?? `exit ${r.status}`}):\n${output.trim()}`,
    };
  }
  return { ok: true, output };
}

/** The options of a pnpm command line that change which registry it uses. */
function registryOptions(argv) {
  const out = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (/^--(registry|npmrc-auth-file|userconfig)=/.test(a) || /^--config\.[^=]+=/.test(a) || a === '--ignore-workspace') out.push(a);
    else if (/^--(registry|npmrc-auth-file|userconfig)$/.test(a) || /^--config\.[^=]+$/.test(a)) {
      if (argv[i + 1] !== undefined) out.push(a, argv[++i]);
    }
  }
  return out;
}

/**
 * The command line of the process running this publish: the nearest ancestor (above the shell
 * that runs the script) whose arguments include "publish".
 */
function publishingProcess() {
  let pid = process.ppid;
  for (let depth = 0; depth < 6 && pid > 1; depth++) {
    const p = processInfo(pid);
    if (!p) break;
    if (p.argv.includes('publish')) return { ok: true, argv: p.argv };
    pid = p.ppid;
  }
  return { ok: false, message: 'cannot find the "publish" command line that runs this script, so the --registry it was given is unknown' };
}

/** `{ ppid, argv }` of `pid`, from /proc where there is one, else from ps (argument boundaries lost). */
function processInfo(pid) {
  if (existsSync(`/proc/${pid}/cmdline`)) {
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').slice(0, -1);
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // The command name in parentheses may itself hold spaces and parentheses: split after the last one.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      return { ppid, argv };
    } catch {
      return undefined;
    }
  }
  const r = spawnSync('ps', ['-o', 'ppid=', '-o', 'args=', '-p', String(pid)], { encoding: 'utf8' });
  const m = /^\s*(\d+)\s+(.*)$/.exec(r.stdout ?? '');
  return m ? { ppid: Number(m[1]), argv: (m[2] ?? '').trim().split(/\s+/) } : undefined;
}
