// The entry of dist/ajv.cjs (tsup.config.ts): ajv and ajv-formats bundled into one CommonJS file,
// which ajv-lazy.ts requires at the first schema compile. Nothing imports this module.

export { Ajv } from 'ajv';
export { Ajv2020 } from 'ajv/dist/2020.js';
export { default as addFormats } from 'ajv-formats';
