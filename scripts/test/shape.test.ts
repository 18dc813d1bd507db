import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain script without type declarations; its findings are plain objects.
import { describe as describeFinding, MAX_FILE_LINES, MAX_FUNCTION_LINES, shapeFindings } from '../shape.mjs';

/**
 * The style guide's bounds on the source tree, held by a test rather than by review: no source
 * file over 600 lines, no function over 150 (nested closures count toward the function that
 * holds them), no import cycle inside a package. `node scripts/shape.mjs` prints the same list.
 */
describe('the source tree’s shape', () => {
  it(`has no file over ${MAX_FILE_LINES} lines, no function over ${MAX_FUNCTION_LINES}, no import cycle`, () => {
    const findings = (shapeFindings() as unknown[]).map(describeFinding);
    expect(findings).toEqual([]);
  });
});
