import { readdirSync, readFileSync } from 'node:fs';

/**
 * The children of `pid` in ascending order, from /proc: every task's `children` list, or, on a
 * kernel without those files, every process whose parent it is (from its stat).
 */
export function childrenOf(pid: number): number[] {
  const out: number[] = [];
  try {
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      for (const c of readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').split(' ')) if (c.trim()) out.push(Number(c));
    }
    return out.sort((a, b) => a - b);
  } catch {
    out.length = 0;
  }
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const st = readFileSync(`/proc/${p}/stat`, 'utf8');
      if (Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]) === pid) out.push(Number(p));
    } catch {
      // gone meanwhile
    }
  }
  return out.sort((a, b) => a - b);
}
