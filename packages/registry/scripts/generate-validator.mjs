#!/usr/bin/env node
// Generates src/meta-2020-12.generated.ts and src/meta-draft-07.generated.ts: the JSON Schema
// meta-schemas of the two dialects a tool schema may use, compiled ahead of time with the options
// tool schemas are compiled with (config/standalone-validator.mjs says how). Checking a tool's
// schema then compiles no meta-schema at run time (~40 ms at the first compile of each process:
// every one-shot call, every server's and worker's first call).
//
//   node scripts/generate-validator.mjs          writes the files
//   node scripts/generate-validator.mjs --check  exits 1 when a file is stale

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generateMain, standaloneModule } from '../../../config/standalone-validator.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

/** Each dialect: its generated file, the Ajv class that knows it, and its meta-schema's id. */
export const DIALECTS = [
  {
    file: join(here, '../src/meta-2020-12.generated.ts'),
    ajv: () => require('ajv/dist/2020.js').Ajv2020,
    id: 'https://json-schema.org/draft/2020-12/schema',
  },
  { file: join(here, '../src/meta-draft-07.generated.ts'), ajv: () => require('ajv').Ajv, id: 'http://json-schema.org/draft-07/schema' },
];

/** The module's text for one dialect. */
export function generateValidator(d) {
  // As json-schema.ts compiles tool schemas (TOOL_SCHEMA_AJV_OPTIONS, formats), minus the linear
  // regular expression engine: the meta-schemas' own patterns ($anchor's) mean the same under RegExp.
  const Ajv = d.ajv();
  const ajv = new Ajv({ allErrors: true, strict: false, logger: false, code: { source: true, esm: true } });
  require('ajv-formats').default(ajv);
  // A factory: only a process that compiles a tool schema evaluates it (listing never does).
  return standaloneModule(ajv, ajv.getSchema(d.id), d.id, import.meta.url, { factory: true });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv.includes('--check')) {
    const stale = DIALECTS.filter((d) => readFileSync(d.file, 'utf8') !== generateValidator(d));
    for (const d of stale) console.error(`${d.file} is stale: run node scripts/generate-validator.mjs`);
    process.exit(stale.length > 0 ? 1 : 0);
  }
  for (const d of DIALECTS) generateMain(d.file, generateValidator(d));
}
