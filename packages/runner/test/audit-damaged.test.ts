import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { AUDIT_RECOVERED } from '../src/index.js';
import { failed, okData, py, setup } from './helpers.js';

const lines = (file: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l !== '');

/** Changes one byte of entry `seq` (line `seq` of a log that was never rotated): the last digit of its time. */
function flipTime(log: string, seq: number): void {
  const all = lines(log);
  const line = all[seq - 1] as string;
  const at = line.indexOf('","type":"') - 2; // `…SS.mmmZ","type"`: the last millisecond digit
  all[seq - 1] = `${line.slice(0, at)}${(Number(line[at]) + 1) % 10}${line.slice(at + 1)}`;
  writeFileSync(log, `${all.join('\n')}\n`);
}

describe('an audit log whose chain is broken after its newest checkpoint', () => {
  it('the engine opens refusing every call and forge (audit_unavailable naming the entry), appends nothing, and takes calls again once the log is restored', async () => {
    const fx = await setup();
    expect(await fx.forge.forgeTool(py('echo', 'print(json.dumps({"ok": True, "data": args}))'))).toMatchObject({ ok: true });
    await fx.forge.close(); // its close checkpoints everything so far
    const log = fx.forge.paths.auditLog;
    const checkpoints = `${log}.checkpoints`;
    const vouched = readFileSync(checkpoints);
    const from = lines(log).length;
    const second = await fx.reopen();
    for (let i = 0; i < 3; i++) okData(await second.callTool('echo', { i }));
    await second.close();
    // As if the second engine had died before its close checkpoint: its entries are vouched for by none.
    writeFileSync(checkpoints, vouched);
    const intact = readFileSync(log);
    const seq = from + 2;
    flipTime(log, seq);
    const damaged = readFileSync(log);

    const f = await fx.reopen();
    expect((await f.listTools()).map((t) => t.tool.name)).toContain('echo');
    const refused = failed(await f.callTool('echo', { i: 9 }), 'audit_unavailable');
    expect(refused.message).toContain(`${log}: entry ${seq} (forge.log line ${seq}) hash_mismatch`);
    expect(refused.message).toContain('(forge audit verify)');
    expect(await f.forgeTool(py('other', 'print(json.dumps({"ok": True, "data": 1}))'))).toMatchObject({
      ok: false,
      kind: 'audit_unavailable',
    });
    failed(await f.callTool('echo', { i: 10 }), 'audit_unavailable');
    expect(readFileSync(log).equals(damaged)).toBe(true);

    // Restored from a copy: the next call opens the log, appends the recovery entry and is answered.
    writeFileSync(log, intact);
    expect(okData(await f.callTool('echo', { i: 11 }))).toEqual({ i: 11 });
    await f.close();
    const recovered = fx.entries(AUDIT_RECOVERED);
    expect(recovered).toHaveLength(1);
    expect(recovered[0]?.data).toMatchObject({ errno: ['log_corrupt'], refused: 3, log });
    expect(fx.entries('forge.called').map((e) => e.data.name)).toEqual(['echo', 'echo', 'echo', 'echo']);
  });
});
