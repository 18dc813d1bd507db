import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import type { Ajv, Options } from 'ajv';

// ajv takes most of a cold import of this package (it is ~90 ms of CommonJS). Loading a registry
// never needs it, so it is required on first use: the first compile, not the import.
const require = createRequire(import.meta.url);

/** A JSON Schema dialect ajv is created for. */
export type AjvDialect = '2020-12' | 'draft-07';

/** What src/ajv-bundle.ts exports. */
interface AjvLib {
  Ajv2020: typeof import('ajv/dist/2020.js').Ajv2020;
  Ajv: typeof import('ajv').Ajv;
  addFormats: (ajv: Ajv) => Ajv;
}

let lib: AjvLib | undefined;

/**
 * ajv and ajv-formats: built, the one CommonJS file beside this module (dist/ajv.cjs, made from
 * src/ajv-bundle.ts: a single file to read and compile instead of some seventy, about two thirds
 * of the cost of requiring them); from source (tests), the packages themselves. Same code either way.
 */
function ajvLib(): AjvLib {
  if (!lib) {
    const bundled = fileURLToPath(new URL('./ajv.cjs', import.meta.url));
    lib = existsSync(bundled)
      ? (require(bundled) as AjvLib)
      : {
          Ajv2020: (require('ajv/dist/2020.js') as typeof import('ajv/dist/2020.js')).Ajv2020,
          Ajv: (require('ajv') as typeof import('ajv')).Ajv,
          // CommonJS: module.exports is the plugin, and module.exports.default too.
          addFormats: (require('ajv-formats') as { default: (ajv: Ajv) => Ajv }).default,
        };
  }
  return lib;
}

/** A new ajv instance of `dialect` with ajv-formats added, loading ajv on first call. */
export function newAjv(dialect: AjvDialect, options: Options): Ajv {
  const { Ajv2020, Ajv: AjvDraft07, addFormats } = ajvLib();
  const ajv = dialect === '2020-12' ? new Ajv2020(options) : new AjvDraft07(options);
  addFormats(ajv);
  return ajv;
}
