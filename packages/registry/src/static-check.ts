/**
 * A lint over a tool's `impl` that catches obvious mistakes early (shelling out, raw sockets
 * without a network grant, `rm -rf /`). It is not a security boundary: code can always hide
 * what it does from a regular expression. The sandbox is the boundary.
 */

/** The language family a runtime name belongs to. */
export type RuntimeFamily = 'python' | 'node' | 'shell';

/** One static-check rule. `id` is stable; tests and policies may refer to it. */
export interface StaticRule {
  id: string;
  family: RuntimeFamily;
  /** Only applies when the tool has no network grant. */
  networkOnly: boolean;
  /** Why the pattern is flagged and what to do instead. */
  message: string;
  pattern: RegExp;
}

/** A rule that matched: its id, the 1-based line of `impl`, and the rule's message. */
export interface StaticFinding {
  rule: string;
  line: number;
  message: string;
}

const MODULE_PY = (mods: string) =>
  new RegExp(`^\\s*(?:import\\s+(?:[\\w.]+\\s*,\\s*)*(?:${mods})\\b|from\\s+(?:${mods})\\b[\\w.]*\\s+import\\b)`);
const MODULE_JS = (mods: string) =>
  new RegExp(`(?:\\brequire\\s*\\(\\s*|\\bfrom\\s*|\\bimport\\s*\\(\\s*|^\\s*import\\s+)['"\`](?:node:)?(?:${mods})(?:/[\\w/]*)?['"\`]`);
const RM_ROOT =
  /\brm\s+(?:-[-\w]+\s+)*?(?:-\w*[rR]\w*|--recursive)\s+(?:-[-\w]+\s+)*(?:["']?(?:\/\*?|~\/?|\$HOME\/?|\$\{HOME\}\/?)["']?)(?=\s|;|&|\||\)|$)/;

/** Every rule, per family. */
export const STATIC_RULES: readonly StaticRule[] = Object.freeze([
  {
    id: 'py.os_system',
    family: 'python',
    networkOnly: false,
    message: 'os.system/os.popen/os.exec*/os.spawn* start other programs; do the work in Python instead',
    pattern: /\bos\.(?:system|popen|exec[lv]p?e?|spawn[lv]p?e?|posix_spawnp?|fork)\s*\(/,
  },
  {
    id: 'py.subprocess',
    family: 'python',
    networkOnly: false,
    message: 'subprocess starts other programs; do the work in Python instead',
    pattern: /(?:^\s*(?:import\s+(?:[\w.]+\s*,\s*)*subprocess\b|from\s+subprocess\s+import\b)|\bsubprocess\.\w+\s*\()/,
  },
  {
    id: 'py.ctypes',
    family: 'python',
    networkOnly: false,
    message: 'ctypes calls native code directly; tools must stay in Python',
    pattern: MODULE_PY('ctypes|cffi'),
  },
  {
    id: 'py.socket',
    family: 'python',
    networkOnly: true,
    message: 'raw sockets need network, which this tool has not been granted',
    pattern: MODULE_PY('socket'),
  },
  {
    id: 'py.http_client',
    family: 'python',
    networkOnly: true,
    message: 'an HTTP client needs network, which this tool has not been granted',
    pattern: MODULE_PY('requests|httpx|aiohttp|urllib3|http\\.client|urllib\\.request'),
  },
  {
    id: 'py.rmtree_root',
    family: 'python',
    networkOnly: false,
    message: 'shutil.rmtree of "/" or the home directory deletes everything it can reach',
    pattern: /\bshutil\.rmtree\s*\(\s*(?:['"](?:\/|~\/?)['"]|os\.path\.expanduser\s*\(\s*['"]~\/?['"]\s*\))\s*[,)]/,
  },
  {
    id: 'node.child_process',
    family: 'node',
    networkOnly: false,
    message: 'child_process starts other programs; do the work in JavaScript instead',
    pattern: MODULE_JS('child_process'),
  },
  {
    id: 'node.vm',
    family: 'node',
    networkOnly: false,
    message: 'vm compiles and runs code strings; it is not a sandbox and hides what the tool does',
    pattern: MODULE_JS('vm'),
  },
  {
    id: 'node.process_binding',
    family: 'node',
    networkOnly: false,
    message: "process.binding/dlopen reach Node's internals or native code; use the public modules",
    pattern: /\bprocess\s*\.\s*(?:binding|_linkedBinding|dlopen)\s*\(/,
  },
  {
    id: 'node.net',
    family: 'node',
    networkOnly: true,
    message: 'net/dgram/tls/http/https/http2 need network, which this tool has not been granted',
    pattern: MODULE_JS('net|dgram|tls|http|https|http2'),
  },
  {
    id: 'node.fetch',
    family: 'node',
    networkOnly: true,
    message: 'fetch needs network, which this tool has not been granted',
    pattern: /(?<![\w.$])fetch\s*\(/,
  },
  {
    id: 'sh.network_tool',
    family: 'shell',
    networkOnly: true,
    message: 'curl/wget/nc and friends need network, which this tool has not been granted',
    pattern: /(?:^|[\s;&|(`]|\$\()(?:curl|wget|nc|ncat|netcat|socat|telnet|ssh|scp|sftp|ftp)(?=\s|;|&|\||\)|$)/,
  },
  {
    id: 'sh.dev_tcp',
    family: 'shell',
    networkOnly: true,
    message: '/dev/tcp and /dev/udp open network connections, which this tool has not been granted',
    pattern: /\/dev\/(?:tcp|udp)\//,
  },
  {
    id: 'sh.rm_rf_root',
    family: 'shell',
    networkOnly: false,
    message: 'rm -r of "/" or the home directory deletes everything it can reach',
    pattern: RM_ROOT,
  },
  {
    id: 'sh.no_preserve_root',
    family: 'shell',
    networkOnly: false,
    message: '--no-preserve-root only exists to delete "/"',
    pattern: /--no-preserve-root\b/,
  },
] satisfies StaticRule[]);

/**
 * The family of a runtime name: `python`, `python3`, `python3.11` → python; `node`, `nodejs`,
 * `node20` → node; `bash`, `sh`, `dash`, `zsh` → shell. Undefined for anything else.
 */
export function runtimeFamily(runtime: string): RuntimeFamily | undefined {
  if (/^python\d*(?:\.\d+)*$/.test(runtime)) return 'python';
  if (/^node(?:js)?\d*$/.test(runtime)) return 'node';
  if (/^(?:bash|sh|dash|zsh|ksh)$/.test(runtime)) return 'shell';
  return undefined;
}

/** True for a line that is a comment as a whole in `family` (trailing comments are still read). */
function isCommentLine(line: string, family: RuntimeFamily): boolean {
  const t = line.trimStart();
  if (family === 'node') return t.startsWith('//') || t.startsWith('/*') || t.startsWith('*');
  return t.startsWith('#');
}

/** Options of `staticCheck`. */
export interface StaticCheckOptions {
  /** The tool is granted network: network rules do not apply. Default false. */
  network?: boolean;
}

/**
 * Runs the rules of `runtime`'s family over `impl`, line by line, skipping whole-line comments.
 * Returns the findings in line order (at most one per rule and line); an empty array means
 * nothing obvious was found, not that the code is safe. An unknown runtime gets no findings.
 */
export function staticCheck(tool: { impl: string; runtime: string }, options: StaticCheckOptions = {}): StaticFinding[] {
  const family = runtimeFamily(tool.runtime);
  if (!family) return [];
  const rules = STATIC_RULES.filter((r) => r.family === family && (!r.networkOnly || !options.network));
  const findings: StaticFinding[] = [];
  const lines = tool.impl.split(/\r?\n/);
  lines.forEach((line, i) => {
    if (isCommentLine(line, family)) return;
    for (const r of rules) if (r.pattern.test(line)) findings.push({ rule: r.id, line: i + 1, message: r.message });
  });
  return findings;
}
