import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { EnvironmentError } from '../args.js';
import type { Command } from '../command.js';

export const policyCheck: Command = {
  words: 'policy check',
  usage: 'forge policy check [<file>]',
  summary: "validate policy.json and policy.rules (the user's and the workspace's, or the given file); print the effective policy",
  positionals: [0, 1],
  async run({ positionals }, { out, where }) {
    const file = positionals[0] === undefined ? undefined : resolve(positionals[0]);
    if (file && !existsSync(file)) throw new EnvironmentError(`${positionals[0]}: no such file`);
    const w = await where();
    const { checkPolicies } = await import('../policy-check.js');
    const r = checkPolicies({ home: w.home, project: w.project, ...(file ? { file } : {}) });
    if (out.json) {
      out.data(r);
      return r.ok ? 0 : 1;
    }
    const s = out.style;
    for (const f of r.files) {
      if (f.status === 'absent') out.line(`${s.dim('-')} ${f.file} ${s.dim('(absent)')}`);
      else if (f.status === 'ok') out.line(`${s.green('✓')} ${f.file}${f.rules !== undefined ? ` ${s.dim(`(${f.rules} rules)`)}` : ''}`);
      else out.line(`${s.red('✗')} ${f.problem?.message}`);
    }
    if (r.effective) {
      out.line('');
      out.line(s.dim(file ? 'effective policy (bundle defaults ← this file):' : 'effective policy (bundle defaults ← user ← workspace):'));
      out.jsonLine(r.effective, 2);
    }
    return r.ok ? 0 : 1;
  },
};
