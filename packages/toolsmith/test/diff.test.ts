import { describe, expect, it } from 'vitest';
import { lineDiff } from '../src/index.js';

describe('lineDiff', () => {
  it('shows kept lines, then a changed line as the old one out and the new one in', () => {
    expect(lineDiff('a\nb\nc', 'a\nB\nc\nd')).toBe(['  a', '- b', '+ B', '  c', '+ d'].join('\n'));
  });
  it('is all kept lines for equal texts, all additions from nothing', () => {
    expect(lineDiff('x\ny', 'x\ny')).toBe('  x\n  y');
    expect(lineDiff('', 'p')).toBe('- \n+ p');
  });
});
