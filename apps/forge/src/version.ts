import pkg from '../package.json' with { type: 'json' };

/** This CLI's version (from its package.json, inlined at build time). */
export const VERSION: string = pkg.version;
