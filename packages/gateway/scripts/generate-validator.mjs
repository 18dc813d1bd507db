#!/usr/bin/env node
// Generates src/gateway-validator.generated.ts: schema/gateway.schema.json compiled ahead of time
// (config/standalone-validator.mjs says how and why).
//
//   node scripts/generate-validator.mjs          writes the file
//   node scripts/generate-validator.mjs --check  exits 1 when the file is stale

import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generateMain, standaloneValidator } from '../../../config/standalone-validator.mjs';

const here = dirname(fileURLToPath(import.meta.url));
export const GENERATED = join(here, '../src/gateway-validator.generated.ts');

/** The module's text. */
export function generateValidator() {
  return standaloneValidator(join(here, '../schema/gateway.schema.json'), 'schema/gateway.schema.json', import.meta.url);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) generateMain(GENERATED, generateValidator());
