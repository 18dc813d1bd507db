import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain script, no declarations
import { GENERATED, generateValidator } from '../scripts/generate-validator.mjs';

describe('the precompiled gateway.json validator', () => {
  it('is what the schema and the installed Ajv generate now (run `pnpm --filter @forge/gateway generate` if not)', () => {
    expect(readFileSync(GENERATED, 'utf8') === generateValidator(), `${GENERATED} is stale`).toBe(true);
  });
});
