import type { Command } from '../command.js';

export const demo: Command = {
  words: 'demo',
  usage: 'forge demo',
  summary: 'a guided tour in scratch directories: forge, call, refuse, sandbox, audit, tamper (removes everything after)',
  async run(_p, { out, cliPath }) {
    const { runDemo } = await import('../demo.js');
    const r = await runDemo({ cliPath, out });
    if (out.json) out.data(r);
    return r.ok ? 0 : 1;
  },
};
