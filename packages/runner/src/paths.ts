import { existsSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';

/** `$FORGE_HOME`, else `$XDG_CONFIG_HOME/forge`, else `~/.config/forge`. */
export function defaultForgeHome(env: NodeJS.ProcessEnv = process.env): string {
  if (env.FORGE_HOME) return resolve(env.FORGE_HOME);
  if (env.XDG_CONFIG_HOME) return join(resolve(env.XDG_CONFIG_HOME), 'forge');
  return join(homedir(), '.config', 'forge');
}

/** The project of `cwd`: the nearest ancestor holding `.forge/` or `.git`, else `cwd` itself. */
export function findProject(cwd: string = process.cwd()): string {
  let dir = resolve(cwd);
  for (;;) {
    if (isDir(join(dir, '.forge')) || existsSync(join(dir, '.git'))) return dir;
    const up = dirname(dir);
    if (up === dir) return resolve(cwd);
    dir = up;
  }
}

function isDir(p: string): boolean {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
}

/** Every path forge uses, from its home and project (DESIGN "On-disk layout"). */
export interface ForgePaths {
  home: string;
  project: string;
  /** `<project>/.forge` */
  projectForge: string;
  userPolicy: string;
  workspacePolicy: string;
  rules: string;
  vault: string;
  auditDir: string;
  auditLog: string;
  /** The newest signed checkpoint of the audit log, kept outside its directory (with a signing key). */
  auditAnchor: string;
  /** The witnesses that cosign the audit log's checkpoints (`<home>/witnesses.json`), and the newest checkpoint they cosigned (`<home>/audit.witnessed`). */
  witnesses: string;
  auditWitnessed: string;
  cacheDir: string;
  runsDir: string;
  /** Content-addressed copies of tool implementations, mounted read-only into runs. */
  codeDir: string;
  /** The gateway's upstream servers: `<home>/gateway.json` and `<project>/.forge/gateway.json`. */
  userGateway: string;
  workspaceGateway: string;
  /** The gateway's own state (pins of approved upstream tools): `<home>/gateway/`. */
  gatewayDir: string;
  /** The operator's call hooks: `<home>/hooks/{pre,post}.d/` and `<home>/hooks/tools/<name>/{pre,post}.d/`. */
  hooksDir: string;
  /** The toolsmith's state of this project (gaps, proposals): `<project>/.forge/toolsmith/`. */
  toolsmithDir: string;
  /** The job queue of this project's front-ends and workers on one host: `<project>/.forge/queue/`. */
  queueDir: string;
}

export function forgePaths(home: string, project: string, env: NodeJS.ProcessEnv = process.env): ForgePaths {
  const projectForge = join(project, '.forge');
  return {
    home,
    project,
    projectForge,
    userPolicy: join(home, 'policy.json'),
    workspacePolicy: join(projectForge, 'policy.json'),
    rules: join(projectForge, 'policy.rules'),
    vault: env.FORGE_SECRET_VAULT ? resolve(env.FORGE_SECRET_VAULT) : join(home, 'secrets.json'),
    auditDir: join(home, 'audit'),
    auditLog: join(home, 'audit', 'forge.log'),
    auditAnchor: join(home, 'audit.anchor'),
    witnesses: join(home, 'witnesses.json'),
    auditWitnessed: join(home, 'audit.witnessed'),
    cacheDir: join(home, 'cache'),
    runsDir: join(projectForge, 'runs'),
    codeDir: join(home, 'code'),
    userGateway: join(home, 'gateway.json'),
    workspaceGateway: join(projectForge, 'gateway.json'),
    gatewayDir: join(home, 'gateway'),
    hooksDir: join(home, 'hooks'),
    toolsmithDir: join(projectForge, 'toolsmith'),
    queueDir: join(projectForge, 'queue'),
  };
}
