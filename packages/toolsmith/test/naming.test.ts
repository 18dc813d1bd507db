import { toolNameProblem } from '@forge/registry';
import { describe, expect, it } from 'vitest';
import { capabilitySlug, deriveToolName } from '../src/naming.js';

describe('capabilitySlug', () => {
  it('normalises segments: lower case, runs of other characters to _, trimmed', () => {
    expect(capabilitySlug('CSV: filter rows')).toEqual({ ok: true, slug: 'csv_filter_rows' });
    expect(capabilitySlug('text.Word Count')).toEqual({ ok: true, slug: 'text.word_count' });
    expect(capabilitySlug('  Résumé -- parse!! ')).toEqual({ ok: true, slug: 'r_sum_parse' });
    expect(capabilitySlug('a.b.c.d')).toEqual({ ok: true, slug: 'a.b.c.d' });
    expect(capabilitySlug('json.Parse_V2')).toEqual({ ok: true, slug: 'json.parse_v2' });
  });

  it('is idempotent: a slug is its own slug', () => {
    for (const c of ['CSV: filter rows', 'text.Word Count', 'x.y_z']) {
      const a = capabilitySlug(c);
      if (!a.ok) throw new Error(a.message);
      expect(capabilitySlug(a.slug)).toEqual(a);
    }
  });

  it('refuses empty segments, a leading digit, too many segments, too long input or slug', () => {
    const cases: Array<[string, RegExp]> = [
      ['', /segment 1 is empty/],
      ['text..count', /segment 2 is empty/],
      ['text.', /segment 2 is empty/],
      ['!!!', /segment 1 is empty/],
      ['2fa codes', /segment 1 \("2fa_codes"\) must start with a letter/],
      ['a.b.c.d.e', /has 5 dot-separated segments; use at most 4/],
      ['x'.repeat(201), /is 201 characters; use at most 200/],
      ['y'.repeat(49), /\(49 characters\); use a shorter capability/],
    ];
    for (const [c, re] of cases) {
      const r = capabilitySlug(c);
      expect(r.ok, c).toBe(false);
      if (r.ok) continue;
      expect(r.kind).toBe('validation_failed');
      expect(r.message).toMatch(re);
      expect(r.message).toContain('capability');
    }
    expect(capabilitySlug('y'.repeat(48))).toEqual({ ok: true, slug: 'y'.repeat(48) });
  });

  it('refuses a non-string', () => {
    expect(capabilitySlug(42 as unknown as string)).toMatchObject({ ok: false, kind: 'validation_failed' });
  });
});

describe('deriveToolName', () => {
  it('prefixes the namespace, or uses the slug alone', () => {
    expect(deriveToolName('csv_filter_rows', 'data')).toEqual({ ok: true, name: 'data.csv_filter_rows' });
    expect(deriveToolName('text.word_count', undefined)).toEqual({ ok: true, name: 'text.word_count' });
    expect(deriveToolName('text.word_count', '')).toEqual({ ok: true, name: 'text.word_count' });
  });

  it('every derived name is a valid forge tool name', () => {
    for (const c of ['CSV: filter rows', 'text.Word Count', 'a.b.c.d', 'z'.repeat(48)]) {
      const s = capabilitySlug(c);
      if (!s.ok) throw new Error(s.message);
      const n = deriveToolName(s.slug, 'team_a');
      if (!n.ok) throw new Error(n.message);
      expect(toolNameProblem(n.name)).toBeUndefined();
    }
  });

  it('refuses a name over 64 bytes, saying how long and what to do', () => {
    const r = deriveToolName('s'.repeat(48), 'n'.repeat(20));
    expect(r).toMatchObject({ ok: false, kind: 'validation_failed' });
    if (r.ok) return;
    expect(r.message).toContain('is 69 characters');
    expect(r.message).toContain('use a shorter capability');
    expect(deriveToolName('s'.repeat(48), 'n'.repeat(15))).toEqual({ ok: true, name: `${'n'.repeat(15)}.${'s'.repeat(48)}` });
  });

  it('refuses a namespace that makes an invalid name', () => {
    expect(deriveToolName('x', '9ns')).toMatchObject({ ok: false, kind: 'validation_failed' });
    expect(deriveToolName('x', 'bad ns')).toMatchObject({ ok: false, kind: 'validation_failed' });
    expect(deriveToolName('', 'ns')).toMatchObject({ ok: false, kind: 'validation_failed' });
  });
});
