import { createRequire } from 'node:module';
import type { Ajv, Options } from 'ajv';

// ajv takes most of a cold import of this package (it is ~90 ms of CommonJS). Loading a registry
// never needs it, so it is required on first use: the first compile, not the import.
const require = createRequire(import.meta.url);

/** A JSON Schema dialect ajv is created for. */
export type AjvDialect = '2020-12' | 'draft-07';

/** A new ajv instance of `dialect` with ajv-formats added, loading ajv on first call. */
export function newAjv(dialect: AjvDialect, options: Options): Ajv {
  const ajv =
    dialect === '2020-12'
      ? new (require('ajv/dist/2020.js') as typeof import('ajv/dist/2020.js')).Ajv2020(options)
      : new (require('ajv') as typeof import('ajv')).Ajv(options);
  // CommonJS: module.exports is the plugin, and module.exports.default too.
  (require('ajv-formats') as { default: (ajv: Ajv) => Ajv }).default(ajv);
  return ajv;
}
