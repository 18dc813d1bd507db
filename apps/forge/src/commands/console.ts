import { UsageError } from '../args.js';
import type { Command } from '../command.js';
import { consoleServices } from '../console-services.js';
import { openForge } from '../context.js';
import { followStop } from '../signals.js';
import { openStore } from '../store.js';
import { VERSION } from '../version.js';
import { operator } from './toolsmith.js';

export const consoleCommand: Command = {
  words: 'console',
  usage: 'forge console [--port N] [--as NAME]',
  summary: 'the operator console in a browser: overview, tools, runs, the audit log verified in the page, approvals',
  details: [
    '--port N    where to listen on 127.0.0.1 (default: a free port); loopback only (reach it from',
    '            elsewhere through ssh -L)',
    '--as NAME   who the console acts as (default $FORGE_OPERATOR, else the login name); approvals',
    '            need policy toolsmith.approvers to list it',
    'It prints one address carrying a token; opening it lets that browser in (a cookie for this',
    'launch). Give it to no one. Stops on SIGINT or SIGTERM.',
  ],
  options: { port: { type: 'string' }, as: { type: 'string' } },
  async run({ values }, { out, where }) {
    const port = values.port === undefined ? 0 : Number(values.port);
    if (typeof values.port === 'string' && (!/^[0-9]{1,5}$/.test(values.port) || port > 65535))
      throw new UsageError(`--port expects a port number from 0 to 65535 (got "${values.port}")`, this.usage);
    const w = await where();
    const as = operator(values, w.env);
    if (!as) throw new UsageError('no operator name: give --as NAME or set FORGE_OPERATOR', this.usage);
    const [{ startConsole }, store] = await Promise.all([import('@forge/console'), openStore(w)]);
    const engine = await openForge(w, { store, watch: true });
    try {
      const con = await startConsole({ services: consoleServices(w, engine, store, VERSION), operator: as, port, version: VERSION });
      try {
        if (out.json) out.jsonLine({ url: con.url, operator: as });
        else {
          out.line(`forge console for ${as}: open ${con.url}`);
          out.note('the address carries this launch’s token: anyone holding it can act as you in the console');
        }
        const { signal, dispose } = followStop(out.gone);
        await new Promise<void>((r) => signal.addEventListener('abort', () => r(), { once: true }));
        dispose();
      } finally {
        await con.close();
      }
    } finally {
      await engine.close();
      await store.close();
    }
    return 0;
  },
};
