/**
 * How a run's start is told apart from its launch failing (start.ts): the start mark found in
 * stderr however the stream is cut, and the launch's own text named and made inert. Pure: no bwrap.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { launchFailure, STARTED, StartWatch, startCommand, startSteps } from '../src/start.js';

/** Cuts `bytes` at the given points (each taken modulo the length) into chunks. */
function cut(bytes: Buffer, points: number[]): Buffer[] {
  const at = [...new Set(points.map((p) => (bytes.length === 0 ? 0 : p % bytes.length)))].sort((a, b) => a - b);
  const out: Buffer[] = [];
  let from = 0;
  for (const p of at) {
    out.push(bytes.subarray(from, p));
    from = p;
  }
  out.push(bytes.subarray(from));
  return out;
}

const text = fc.string({ unit: 'binary', maxLength: 300 }).filter((s) => !s.includes(STARTED));
const points = fc.array(fc.nat(), { maxLength: 12 });

describe('StartWatch', () => {
  it('finds the mark however stderr is cut: the tail gets everything but the mark, before holds what came first', () => {
    fc.assert(
      fc.property(text, fc.string({ unit: 'binary', maxLength: 300 }), points, (before, after, at) => {
        const w = new StartWatch();
        const out = cut(Buffer.from(before + STARTED + after), at).map((c) => w.push(c));
        expect(w.started).toBe(true);
        expect(Buffer.concat(out).toString()).toBe(before + after);
        expect(w.before).toBe(before);
      }),
    );
  });

  it('without the mark nothing started, and every byte is still handed on (the launch failure is all of it)', () => {
    fc.assert(
      fc.property(text, points, (all, at) => {
        const w = new StartWatch();
        const out = cut(Buffer.from(all), at).map((c) => w.push(c));
        expect(w.started).toBe(false);
        expect(w.before).toBe(all);
        expect(Buffer.concat([...out, w.flush()]).toString()).toBe(all);
      }),
    );
  });

  it('a tool writing the mark again after the start changes nothing', () => {
    const w = new StartWatch();
    w.push(Buffer.from(`bwrap warning\n${STARTED}`));
    expect(w.push(Buffer.from(`${STARTED}tool`)).toString()).toBe(`${STARTED}tool`);
    expect(w.before).toBe('bwrap warning\n');
  });
});

describe('launchFailure', () => {
  const ctx = { sysctl: () => undefined, tasks: () => ({ count: 3, limit: undefined }) };

  it('leaves no control, bidi or invisible formatting character of what it quotes in its message', () => {
    // biome-ignore lint/suspicious/noControlCharactersInRegex: matching them is the point
    const unsafe = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/;
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 200 }), (said) => {
        const f = launchFailure(`bwrap: Can't mkdir /w/${said}: Permission denied`, 'exited 1', ctx);
        expect(unsafe.test(f.message)).toBe(false);
        expect(unsafe.test(f.fix)).toBe(false);
      }),
    );
    expect(launchFailure('bwrap: \u001b[2Jcleared\u202e', 'exited 1', ctx).message).toContain('\\u001b[2Jcleared\\u202e');
  });
});

describe('the starting shell', () => {
  it("checks the command, sets the run's process limit, marks the start, then becomes the command", () => {
    expect(startSteps("'/usr/bin/python3'", 64)).toEqual([
      "{ [ -x '/usr/bin/python3' ] || { printf 'forge-sandbox: %s is not in the sandbox or not executable there\\n' '/usr/bin/python3' >&2; exit 127; }; }",
      'ulimit -p 64',
      "printf '\\036forge-sandbox: started\\n' >&2",
    ]);
    // Where a pids cgroup holds the limit, no rlimit is set.
    expect(startSteps('"$1"', undefined)).toHaveLength(2);
    expect(startCommand(['/bin/echo', 'hi'], 8)).toEqual([
      '/bin/sh',
      '-c',
      `${startSteps('"$1"', 8).join(' && ')} && exec "$@"`,
      'sandbox',
      '/bin/echo',
      'hi',
    ]);
  });
});
