import { describe, expect, it } from 'vitest';
import { matchExpect, sameData } from '../src/expect.js';

const ok = (data: unknown) => ({ ok: true, data });
const err = (kind: string, message: string) => ({ ok: false, error: { kind, message } });

describe('matchExpect', () => {
  it('absent expect: the run must be ok', () => {
    expect(matchExpect(undefined, ok(1))).toEqual({ ok: true });
    expect(matchExpect(undefined, err('timeout', 'ran past 5 s'))).toEqual({
      ok: false,
      verdict: 'expected ok, got error timeout: ran past 5 s',
    });
  });

  it('plain value: deep-equal with data, key order ignored', () => {
    expect(matchExpect({ a: 1, b: [1, { c: 2, d: 3 }] }, ok({ b: [1, { d: 3, c: 2 }], a: 1 }))).toEqual({ ok: true });
    expect(matchExpect(3, ok(3.0))).toEqual({ ok: true });
    expect(matchExpect(null, ok(null))).toEqual({ ok: true });
    expect(matchExpect([1, 2], ok([1, 2]))).toEqual({ ok: true });
    expect(matchExpect(0, ok(-0))).toEqual({ ok: true });
  });

  it('names the first difference at a JSON pointer', () => {
    const want = { rows: [{ name: 'a' }, { name: 'b' }] };
    expect(matchExpect(want, ok({ rows: [{ name: 'a' }, { name: 'c' }] }))).toEqual({
      ok: false,
      verdict: '/rows/1/name: expected "b", got "c"',
    });
    expect(matchExpect(want, ok({ rows: [{ name: 'a' }] }))).toEqual({ ok: false, verdict: '/rows: expected 2 items, got 1' });
    expect(matchExpect({ a: 1 }, ok({}))).toEqual({ ok: false, verdict: '/a: expected 1, got nothing (missing)' });
    expect(matchExpect({ a: 1 }, ok({ a: 1, b: 2 }))).toEqual({ ok: false, verdict: '/b: not expected, got 2' });
    expect(matchExpect({ 'x/y': 1 }, ok({ 'x/y': '1' }))).toEqual({ ok: false, verdict: '/x~1y: expected 1, got "1"' });
    expect(matchExpect(5, ok(6))).toEqual({ ok: false, verdict: '/: expected 5, got 6' });
    expect(matchExpect(5, err('runtime_error', 'boom'))).toEqual({ ok: false, verdict: 'expected ok, got error runtime_error: boom' });
  });

  it('envelope subset: ok, data when present, error.kind when present', () => {
    expect(matchExpect({ ok: true }, ok({ anything: 1 }))).toEqual({ ok: true });
    expect(matchExpect({ ok: true, data: { n: 1 } }, ok({ n: 1 }))).toEqual({ ok: true });
    expect(matchExpect({ ok: true, data: { n: 1 } }, ok({ n: 2 }))).toEqual({ ok: false, verdict: '/n: expected 1, got 2' });
    expect(matchExpect({ ok: false }, err('timeout', 't'))).toEqual({ ok: true });
    expect(matchExpect({ ok: false, error: { kind: 'timeout' } }, err('timeout', 't'))).toEqual({ ok: true });
    expect(matchExpect({ ok: false, error: { kind: 'timeout' } }, err('runtime_error', 'x'))).toEqual({
      ok: false,
      verdict: 'expected error "timeout", got error runtime_error: x',
    });
    expect(matchExpect({ ok: false }, ok(7))).toEqual({ ok: false, verdict: 'expected an error, got ok with data 7' });
  });

  it('an object whose ok is not a boolean is data, not an envelope', () => {
    expect(matchExpect({ ok: 'yes' }, ok({ ok: 'yes' }))).toEqual({ ok: true });
    expect(matchExpect({ ok: 'yes' }, ok({ ok: 'no' }))).toEqual({ ok: false, verdict: '/ok: expected "yes", got "no"' });
  });

  it('bounds the verdict to 300 characters', () => {
    const long = 'x'.repeat(1000);
    const r = matchExpect(undefined, err('runtime_error', long));
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.verdict.length).toBeLessThanOrEqual(300);
    const d = matchExpect({ a: long }, ok({ a: 'y' }));
    if (!d.ok) expect(d.verdict.length).toBeLessThanOrEqual(300);
    else throw new Error('should differ');
  });
});

describe('sameData', () => {
  it('canonical JSON equality', () => {
    expect(sameData({ a: 1, b: 2 }, { b: 2, a: 1 })).toBe(true);
    expect(sameData([1, 2], [2, 1])).toBe(false);
    expect(sameData({ a: 1 }, { a: '1' })).toBe(false);
    expect(sameData(undefined, null)).toBe(true);
    const cyc: Record<string, unknown> = {};
    cyc.self = cyc;
    expect(sameData(cyc, cyc)).toBe(false);
  });
});
