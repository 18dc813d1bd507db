import type { Command } from '../command.js';

export const doctor: Command = {
  words: 'doctor',
  usage: 'forge doctor',
  summary: 'check this host: sandbox, runtimes, paths, vault and policy; each problem with its fix',
  async run(_p, { out, where }) {
    const w = await where();
    const { diagnose } = await import('../doctor.js');
    const r = await out.progress('probing the sandbox', diagnose(w));
    if (out.json) {
      out.data(r);
      return r.ok ? 0 : 1;
    }
    const s = out.style;
    for (const c of r.checks) {
      out.line(`${c.ok ? (c.warn ? s.yellow('!') : s.green('✓')) : s.red('✗')} ${s.bold(c.name.padEnd(15))} ${c.detail}`);
      if (c.fix) out.line(`  ${' '.repeat(16)}${s.yellow('fix:')} ${c.fix}`);
    }
    out.line('');
    out.line(s.dim(`home ${r.paths.home}  project ${r.paths.project}  audit ${r.paths.auditLog}`));
    out.line(
      r.ok ? s.green('forge can run tools here.') : s.red(`${r.checks.filter((c) => !c.ok).length} problem(s): each with its fix above.`),
    );
    return r.ok ? 0 : 1;
  },
};
