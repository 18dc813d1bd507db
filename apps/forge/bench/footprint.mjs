// A process's footprint from /proc, for the soak: its RSS, its descendants' (sandboxes, the
// shells of sandboxes built ahead), its open descriptors and what they are. Linux only.

import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

const inc = (m, k) => m.set(k, (m.get(k) ?? 0) + 1);

/** pid → ppid of every process. */
function parents() {
  const m = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      m.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  return m;
}

const rssKiB = (pid) => {
  try {
    return Number(/^VmRSS:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
  } catch {
    return 0;
  }
};

/**
 * `pid`'s RSS and its whole tree's (MiB), its descendants and its own children (counts), and its
 * open descriptors. Throws when `pid` is gone.
 */
export function footprint(pid) {
  const pp = parents();
  const tree = new Set([pid]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const [p, parent] of pp)
      if (tree.has(parent) && !tree.has(p)) {
        tree.add(p);
        grew = true;
      }
  }
  let treeKiB = 0;
  for (const p of tree) treeKiB += rssKiB(p);
  let direct = 0;
  for (const parent of pp.values()) if (parent === pid) direct++;
  const fds = readdirSync(`/proc/${pid}/fd`).length;
  return { rss: rssKiB(pid) / 1024, treeRss: treeKiB / 1024, children: tree.size - 1, direct, fds };
}

const TCP_STATES = { '01': 'established', '06': 'time_wait', '08': 'close_wait', '0A': 'listen' };

/** Socket inode → what it is (tcp and its state, unix), from `pid`'s network namespace. */
function socketKinds(pid) {
  const m = new Map();
  for (const table of ['tcp', 'tcp6', 'unix']) {
    let text;
    try {
      text = readFileSync(`/proc/${pid}/net/${table}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (table === 'unix' && cols[6]) m.set(cols[6], 'unix');
      else if (table !== 'unix' && cols[9]) m.set(cols[9], `tcp ${TCP_STATES[cols[3]] ?? cols[3]}`);
    }
  }
  return m;
}

/**
 * `pid`'s open descriptors counted by what they are: `tcp <state>` (a peer gone shows as
 * close_wait), `unix` (a child's stdio is a socket pair), `pipe`, `file`, `anon_inode:[eventfd]`…
 */
export function descriptorKinds(pid) {
  const sockets = socketKinds(pid);
  const m = new Map();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    let target;
    try {
      target = readlinkSync(`/proc/${pid}/fd/${fd}`);
    } catch {
      continue; // closed meanwhile
    }
    const socket = /^socket:\[(\d+)\]$/.exec(target);
    if (socket) inc(m, sockets.get(socket[1]) ?? 'socket');
    else inc(m, target.startsWith('/') ? 'file' : target.replace(/:\[\d+\]$/, ''));
  }
  return m;
}
