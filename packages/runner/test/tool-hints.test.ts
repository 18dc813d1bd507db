import { describe, expect, it } from 'vitest';
import { type AnnotatedSpec, bindModes, type ToolAnnotations, toolAnnotations } from '../src/index.js';
import { setup } from './helpers.js';

const plain = { type: 'object', properties: { n: { type: 'number' } } };
const ro = { type: 'object', properties: { path: { type: 'string', 'x-bind': 'ro' } } };
const rw = { type: 'object', properties: { out: { type: 'string', 'x-bind': 'rw' } } };
// Deep in a combinator under $defs: still found (a branch the input may not take counts too).
const rwDeep = {
  type: 'object',
  $defs: { target: { anyOf: [{ type: 'string', 'x-bind': 'rw' }, { type: 'null' }] } },
  properties: { t: { $ref: '#/$defs/target' } },
};

const RO: ToolAnnotations = { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false };
const WRITES: ToolAnnotations = { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false };
const NET: ToolAnnotations = { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true };

type Row = [string, AnnotatedSpec, { network: boolean }, ToolAnnotations];
const rows: Row[] = [
  ['no binds, no network: read-only, closed world', { input_schema: plain }, { network: false }, RO],
  ['ro bind only: still read-only', { input_schema: ro }, { network: false }, RO],
  ['rw bind: writes, conservatively destructive', { input_schema: rw }, { network: false }, WRITES],
  ['rw bind deep in $defs/anyOf', { input_schema: rwDeep }, { network: false }, WRITES],
  ['network granted: open world, not read-only', { input_schema: plain }, { network: true }, NET],
  [
    'rw bind and deterministic: idempotent',
    { input_schema: rw, meta: { deterministic: true } },
    { network: false },
    { ...WRITES, idempotentHint: true },
  ],
  [
    'network and deterministic: idempotent',
    { input_schema: plain, meta: { deterministic: true } },
    { network: true },
    { ...NET, idempotentHint: true },
  ],
  // Overrides toward less safety count.
  [
    'override: a read-only tool says it writes',
    { input_schema: plain, meta: { annotations: { readOnlyHint: false } } },
    { network: false },
    { ...RO, readOnlyHint: false, destructiveHint: true },
  ],
  [
    'override: says it writes, additively',
    { input_schema: plain, meta: { annotations: { readOnlyHint: false, destructiveHint: false } } },
    { network: false },
    { ...RO, readOnlyHint: false },
  ],
  [
    'override: not idempotent',
    { input_schema: plain, meta: { annotations: { idempotentHint: false } } },
    { network: false },
    { ...RO, idempotentHint: false },
  ],
  [
    'override: reaches the world',
    { input_schema: plain, meta: { annotations: { openWorldHint: true } } },
    { network: false },
    { ...RO, openWorldHint: true },
  ],
  [
    'override: a title passes through',
    { input_schema: plain, meta: { annotations: { title: 'Plot' } } },
    { network: false },
    { title: 'Plot', ...RO },
  ],
  // Never more safety than the sandbox enforces: these claims are ignored.
  ['ignored: read-only with an rw bind', { input_schema: rw, meta: { annotations: { readOnlyHint: true } } }, { network: false }, WRITES],
  ['ignored: read-only with network', { input_schema: plain, meta: { annotations: { readOnlyHint: true } } }, { network: true }, NET],
  [
    'ignored: not destructive with an rw bind',
    { input_schema: rw, meta: { annotations: { destructiveHint: false } } },
    { network: false },
    WRITES,
  ],
  ['ignored: closed world with network', { input_schema: plain, meta: { annotations: { openWorldHint: false } } }, { network: true }, NET],
  [
    'ignored: idempotent with an rw bind, not deterministic',
    { input_schema: rw, meta: { annotations: { idempotentHint: true } } },
    { network: false },
    WRITES,
  ],
  [
    'ignored: every safe claim at once',
    {
      input_schema: rw,
      meta: { annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false } },
    },
    { network: true },
    NET,
  ],
];

describe('toolAnnotations: derived from what the sandbox enforces', () => {
  it.each(rows)('%s', (_label, spec, facts, want) => {
    expect(toolAnnotations(spec, facts)).toEqual(want);
  });

  it('finds x-bind modes anywhere in the schema, and assumes a write past its bounds', () => {
    expect(bindModes(plain)).toEqual({ ro: false, rw: false });
    expect(bindModes(ro)).toEqual({ ro: true, rw: false });
    expect(bindModes(rwDeep)).toEqual({ ro: false, rw: true });
    let deep: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 80; i++) deep = { type: 'object', properties: { a: deep } };
    expect(bindModes(deep).rw).toBe(true);
    expect(bindModes(true)).toEqual({ ro: false, rw: false });
  });
});

describe('sandboxFacts: what the policy grants a persona now', () => {
  it('network per persona_sandbox_overrides, and closed again when allow-rules do not agree', async () => {
    const fx = await setup({ workspacePolicy: { persona_sandbox_overrides: { browser: { network: 'allow' } } } });
    expect(fx.forge.sandboxFacts({ persona: 'browser' })).toEqual({ network: true });
    expect(fx.forge.sandboxFacts({ persona: 'plain' })).toEqual({ network: false });
    expect(fx.forge.sandboxFacts({ persona: 'not a name!' })).toEqual({ network: true });
    const ruled = await setup({
      workspacePolicy: { persona_sandbox_overrides: { browser: { network: 'allow' } } },
      rules: 'allow browser_t tool:x execute\n',
    });
    expect(ruled.forge.sandboxFacts({ persona: 'browser' })).toEqual({ network: false });
  });
});
