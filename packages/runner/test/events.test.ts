/**
 * Tool events: what a sandboxed tool writes to descriptor 3 (FORGE_EVENTS_FD) reaches the caller's
 * onEvent while the tool runs — validated, bounded, redacted — and the run manifest sums it up.
 */
import { describe, expect, it } from 'vitest';
import { EventReader } from '../src/events.js';
import { DEFAULT_EVENT_LIMITS, type EventSummary, type ToolEvent } from '../src/index.js';
import { failed, filesContaining, okData, py, setup, tool } from './helpers.js';

const SECRET = 'sk_live_5e1d9a0c7f3b42e8';
const ALLOW = { persona_secret_allow: { default: ['API_TOKEN'] } };

/** An input schema with one directory bound read-only at its own path. */
const dirInput = { type: 'object', properties: { dir: { type: 'string', 'x-bind': 'ro' } }, required: ['dir'] };

/**
 * The same tool in each runtime: reports progress 1 of 2, then waits (up to 10 s) for `<dir>/go`,
 * which the test creates only when it has the first event, then logs whether it saw it (and what
 * FORGE_EVENTS_FD said) and reports progress 2 of 2.
 */
const LIVE: Record<'python3' | 'node' | 'bash', string> = {
  python3: `import json, os, sys, time
args = json.load(sys.stdin)
ev = os.fdopen(int(os.environ["FORGE_EVENTS_FD"]), "w", buffering=1)
ev.write(json.dumps({"progress": 1, "total": 2, "message": "started"}) + "\\n")
go = os.path.join(args["dir"], "go")
for _ in range(1000):
    if os.path.exists(go): break
    time.sleep(0.01)
ev.write(json.dumps({"log": "info", "message": "saw go", "data": {"go": os.path.exists(go), "fd": os.environ["FORGE_EVENTS_FD"]}}) + "\\n")
ev.write(json.dumps({"progress": 2, "total": 2}) + "\\n")
print(json.dumps({"ok": True, "data": "done"}))
`,
  node: `const fs = require('fs');
const args = JSON.parse(fs.readFileSync(0, 'utf8'));
const fd = Number(process.env.FORGE_EVENTS_FD);
const send = (e) => fs.writeSync(fd, JSON.stringify(e) + '\\n');
send({ progress: 1, total: 2, message: 'started' });
const go = args.dir + '/go';
const pause = new Int32Array(new SharedArrayBuffer(4));
for (let i = 0; i < 1000 && !fs.existsSync(go); i++) Atomics.wait(pause, 0, 0, 10);
send({ log: 'info', message: 'saw go', data: { go: fs.existsSync(go), fd: process.env.FORGE_EVENTS_FD } });
send({ progress: 2, total: 2 });
console.log(JSON.stringify({ ok: true, data: 'done' }));
`,
  bash: `read -r input
dir=\${input#*\\"dir\\":\\"}; dir=\${dir%%\\"*}
echo '{"progress": 1, "total": 2, "message": "started"}' >&"$FORGE_EVENTS_FD"
for i in $(seq 1000); do [ -e "$dir/go" ] && break; sleep 0.01; done
[ -e "$dir/go" ] && seen=true || seen=false
echo "{\\"log\\": \\"info\\", \\"message\\": \\"saw go\\", \\"data\\": {\\"go\\": $seen, \\"fd\\": \\"$FORGE_EVENTS_FD\\"}}" >&"$FORGE_EVENTS_FD"
echo '{"progress": 2, "total": 2}' >&"$FORGE_EVENTS_FD"
echo '{"ok": true, "data": "done"}'
`,
};

const summaryOf = (m: Record<string, unknown>) => m.events as EventSummary;
const zero = { progress: 0, log: 0 };
const noDrops = { too_long: 0, over_limit: 0, over_bytes: 0, not_increasing: 0 };

describe('events from a running tool', () => {
  it.each(['python3', 'node', 'bash'] as const)('%s: arrive in order through onEvent while the tool is still running', async (runtime) => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(tool(`live_${runtime}`, runtime, LIVE[runtime], { input_schema: dirInput }))).ok).toBe(true);
    const dir = fx.file('signal/.keep', '').replace(/\/\.keep$/, '');
    const got: ToolEvent[] = [];
    const env = await fx.forge.callTool(
      `live_${runtime}`,
      { dir },
      {
        onEvent: (e) => {
          got.push(e);
          if (got.length === 1) fx.file('signal/go', '');
        },
      },
    );
    expect(okData(env)).toBe('done');
    // The log line says the tool saw the file the test made on the first event: it came while the tool ran.
    expect(got).toEqual([
      { type: 'progress', progress: 1, total: 2, message: 'started' },
      { type: 'log', level: 'info', message: 'saw go', data: { go: true, fd: '3' } },
      { type: 'progress', progress: 2, total: 2 },
    ]);
    expect(summaryOf(fx.manifest(env.meta.run_id as string))).toEqual({
      delivered: { progress: 2, log: 1 },
      coalesced: 0,
      dropped: noDrops,
      malformed: 0,
      bytes: expect.any(Number),
      last_progress: { progress: 2, total: 2 },
    });
  });

  it('a tool that never writes to descriptor 3, or closes it first, runs as before; its manifest says no events', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(py('quiet', 'print(json.dumps({"ok": True, "data": 1}))'))).ok).toBe(true);
    expect((await fx.forge.forgeTool(py('closer', 'os.close(3)\nprint(json.dumps({"ok": True, "data": 2}))'))).ok).toBe(true);
    expect((await fx.forge.forgeTool(tool('sh_closer', 'sh', 'exec 3>&-\necho \'{"ok": true, "data": 3}\''))).ok).toBe(true);
    const got: ToolEvent[] = [];
    for (const [name, data] of [
      ['quiet', 1],
      ['closer', 2],
      ['sh_closer', 3],
    ] as const) {
      const env = await fx.forge.callTool(name, {}, { onEvent: (e) => got.push(e) });
      expect(okData(env)).toBe(data);
      expect(summaryOf(fx.manifest(env.meta.run_id as string))).toEqual({
        delivered: zero,
        coalesced: 0,
        dropped: noDrops,
        malformed: 0,
        bytes: 0,
      });
    }
    expect(got).toEqual([]);
  });

  it('a cache hit emits nothing; the run that seeded it did', async () => {
    const fx = await setup();
    const det = py(
      'det_events',
      'os.write(3, b\'{"log": "notice", "message": "computing"}\\n\')\nprint(json.dumps({"ok": True, "data": args["n"] * 2}))',
      {
        meta: { deterministic: true },
      },
    );
    expect((await fx.forge.forgeTool(det)).ok).toBe(true);
    const got: ToolEvent[] = [];
    const first = await fx.forge.callTool('det_events', { n: 4 }, { onEvent: (e) => got.push(e) });
    expect(first.meta.cache).toBe('miss');
    expect(got).toEqual([{ type: 'log', level: 'notice', message: 'computing' }]);
    const hit = await fx.forge.callTool('det_events', { n: 4 }, { onEvent: (e) => got.push(e) });
    expect(hit.meta.cache).toBe('hit');
    expect(okData(hit)).toBe(8);
    expect(got).toHaveLength(1);
  });

  it('an onEvent that throws does not disturb the call', async () => {
    const fx = await setup();
    expect(
      (
        await fx.forge.forgeTool(
          py('chatty', 'for i in range(3): os.write(3, b\'{"log": "debug"}\\n\')\nprint(json.dumps({"ok": True, "data": "fine"}))'),
        )
      ).ok,
    ).toBe(true);
    let calls = 0;
    const env = await fx.forge.callTool(
      'chatty',
      {},
      {
        onEvent: () => {
          calls++;
          throw new Error('the hook is broken');
        },
      },
    );
    expect(okData(env)).toBe('fine');
    expect(calls).toBe(3);
  });
});

describe('bounds and validation', () => {
  it('malformed lines are counted and skipped, never fatal; a too-long line is dropped whole; progress must grow', async () => {
    const fx = await setup();
    const lines = [
      'not json',
      '[1, 2]',
      '"a string"',
      '{}',
      '{"progress": "half"}',
      '{"progress": 1, "total": "x"}',
      '{"progress": 1, "log": "info"}',
      '{"log": "loud", "message": "not a level"}',
      '{"log": "info", "message": 42}',
      '', // blank: not counted
      '{"progress": 5, "message": "five"}',
      '{"progress": 5, "message": "five again"}', // not larger: dropped
      '{"progress": 3}', // smaller: dropped
      `{"log": "warning", "message": "${'x'.repeat(DEFAULT_EVENT_LIMITS.lineBytes)}"}`, // over 8 KiB
      '{"log": "warning", "message": "after the long one", "extra": "ignored"}',
    ];
    const impl = `lines = ${JSON.stringify(lines)}
ev = os.fdopen(3, "w")
for l in lines: ev.write(l + "\\n")
ev.write('{"log": "error", "message": "no newline at the end"}')
ev.close()
print(json.dumps({"ok": True, "data": "survived"}))`;
    expect((await fx.forge.forgeTool(py('sloppy', impl))).ok).toBe(true);
    const got: ToolEvent[] = [];
    const env = await fx.forge.callTool('sloppy', {}, { onEvent: (e) => got.push(e) });
    expect(okData(env)).toBe('survived');
    expect(got).toEqual([
      { type: 'progress', progress: 5, message: 'five' },
      { type: 'log', level: 'warning', message: 'after the long one' },
      { type: 'log', level: 'error', message: 'no newline at the end' },
    ]);
    expect(summaryOf(fx.manifest(env.meta.run_id as string))).toEqual({
      delivered: { progress: 1, log: 2 },
      coalesced: 0,
      dropped: { ...noDrops, too_long: 1, not_increasing: 2 },
      malformed: 9,
      bytes: expect.any(Number),
      last_progress: { progress: 5 },
    });
  });

  it('at most 1,000 events are delivered per run; the rest are counted as dropped', async () => {
    const fx = await setup();
    const impl = `ev = os.fdopen(3, "w")
for i in range(1500): ev.write(json.dumps({"log": "info", "message": "line %d" % i}) + "\\n")
ev.close()
print(json.dumps({"ok": True, "data": "ok"}))`;
    expect((await fx.forge.forgeTool(py('verbose', impl))).ok).toBe(true);
    const got: ToolEvent[] = [];
    const env = await fx.forge.callTool('verbose', {}, { onEvent: (e) => got.push(e) });
    expect(okData(env)).toBe('ok');
    expect(got).toHaveLength(DEFAULT_EVENT_LIMITS.events);
    expect(got.at(-1)).toEqual({ type: 'log', level: 'info', message: 'line 999' });
    expect(summaryOf(fx.manifest(env.meta.run_id as string))).toMatchObject({
      delivered: { progress: 0, log: 1000 },
      dropped: { ...noDrops, over_limit: 500 },
      malformed: 0,
    });
  });

  it('a flood of 100,000 progress lines finishes promptly: progress is coalesced, in order, and the last value is delivered', async () => {
    const fx = await setup();
    const impl = `ev = os.fdopen(3, "w", buffering=1 << 16)
for i in range(1, 100001): ev.write('{"progress": %d, "total": 100000}\\n' % i)
ev.close()
print(json.dumps({"ok": True, "data": "flooded"}))`;
    expect((await fx.forge.forgeTool(py('flood', impl))).ok).toBe(true);
    const got: ToolEvent[] = [];
    const env = await fx.forge.callTool('flood', {}, { onEvent: (e) => got.push(e) });
    expect(okData(env)).toBe('flooded');
    const progress = got.map((e) => (e.type === 'progress' ? e.progress : Number.NaN));
    expect(progress[0]).toBe(1);
    expect(progress.at(-1)).toBe(100000);
    expect(progress).toEqual([...progress].sort((a, b) => a - b)); // in order, growing
    expect(got.length).toBeLessThan(1000);
    const s = summaryOf(fx.manifest(env.meta.run_id as string));
    expect(s.delivered.progress + s.coalesced).toBe(100000);
    expect(s).toMatchObject({ malformed: 0, dropped: noDrops, last_progress: { progress: 100000, total: 100000 } });
  });

  it('a flood of 64 MiB of garbage on descriptor 3 neither blocks the tool nor is parsed past the byte bound', async () => {
    const fx = await setup();
    const impl = `ev = os.fdopen(3, "wb")
block = (b"x" * 100 + b"\\n") * 10000
for _ in range(64): ev.write(block)
ev.close()
print(json.dumps({"ok": True, "data": "still here"}))`;
    expect((await fx.forge.forgeTool(py('garbage', impl))).ok).toBe(true);
    const env = await fx.forge.callTool('garbage', {});
    expect(okData(env)).toBe('still here');
    const s = summaryOf(fx.manifest(env.meta.run_id as string));
    expect(s.bytes).toBe(64 * 10000 * 101);
    // Lines are parsed up to 16 MiB; every later one is only counted.
    expect(s.malformed).toBe(Math.floor(DEFAULT_EVENT_LIMITS.bytes / 100));
    expect(s.malformed + s.dropped.over_bytes).toBe(640000);
  });
});

describe('redaction', () => {
  it("a secret value in an event's message or data (a key or a value, escaped or not) never reaches onEvent, the manifest or the disk", async () => {
    const fx = await setup({ workspacePolicy: ALLOW, vault: { API_TOKEN: SECRET } });
    const impl = `t = os.environ["API_TOKEN"]
ev = os.fdopen(3, "w", buffering=1)
ev.write(json.dumps({"log": "info", "message": "token is " + t, "data": {"token": t, t: ["x" + t]}}) + "\\n")
ev.write(json.dumps({"progress": 1, "message": "using " + t}, ensure_ascii=True).replace("s", "\\\\u0073") + "\\n")
print(json.dumps({"ok": True, "data": "used"}))`;
    expect((await fx.forge.forgeTool(py('leaky_events', impl, { meta: { secrets: ['API_TOKEN'] } }))).ok).toBe(true);
    const got: ToolEvent[] = [];
    const env = await fx.forge.callTool('leaky_events', {}, { onEvent: (e) => got.push(e) });
    expect(okData(env)).toBe('used');
    expect(got).toEqual([
      {
        type: 'log',
        level: 'info',
        message: 'token is <redacted:API_TOKEN>',
        data: { token: '<redacted:API_TOKEN>', '<redacted:API_TOKEN>': ['x<redacted:API_TOKEN>'] },
      },
      { type: 'progress', progress: 1, message: 'using <redacted:API_TOKEN>' },
    ]);
    expect(JSON.stringify(fx.manifest(env.meta.run_id as string))).not.toContain(SECRET);
    expect([
      ...filesContaining(fx.home, SECRET).filter((f) => !f.endsWith('/secrets.json')),
      ...filesContaining(fx.project, SECRET),
    ]).toEqual([]);
  });
});

describe('a refused call has no events', () => {
  it('validation_failed runs nothing and calls onEvent never', async () => {
    const fx = await setup();
    expect((await fx.forge.forgeTool(tool('typed', 'sh', 'echo x >&3', { input_schema: { type: 'object', required: ['a'] } }))).ok).toBe(
      true,
    );
    let calls = 0;
    failed(await fx.forge.callTool('typed', {}, { onEvent: () => calls++ }), 'validation_failed');
    expect(calls).toBe(0);
  });
});

describe('EventReader', () => {
  it('joins lines split across chunks anywhere, a multi-byte character included', () => {
    const got: ToolEvent[] = [];
    const reader = new EventReader({ secrets: [], onEvent: (e) => got.push(e) });
    const bytes = Buffer.from('{"log": "info", "message": "héllo ✓"}\n{"log": "debug"}\n');
    for (let i = 0; i < bytes.length; i += 3) reader.push(bytes.subarray(i, i + 3));
    expect(got).toEqual([
      { type: 'log', level: 'info', message: 'héllo ✓' },
      { type: 'log', level: 'debug' },
    ]);
    expect(reader.end()).toMatchObject({ delivered: { progress: 0, log: 2 }, bytes: bytes.length, malformed: 0 });
  });

  it('holds progress that comes sooner than the interval, delivers it before a later log line, and nothing after end()', () => {
    const got: ToolEvent[] = [];
    const reader = new EventReader({ secrets: [], onEvent: (e) => got.push(e), limits: { progressIntervalMs: 60_000 } });
    reader.push(Buffer.from('{"progress": 1}\n{"progress": 2}\n{"progress": 3}\n{"log": "info"}\n{"progress": 4}\n'));
    expect(got).toEqual([
      { type: 'progress', progress: 1 },
      { type: 'progress', progress: 3 },
      { type: 'log', level: 'info' },
    ]);
    const s = reader.end();
    expect(got.at(-1)).toEqual({ type: 'progress', progress: 4 });
    expect(s).toMatchObject({ delivered: { progress: 3, log: 1 }, coalesced: 1, last_progress: { progress: 4 } });
    reader.push(Buffer.from('{"log": "info"}\n'));
    expect(got).toHaveLength(4);
  });
});
