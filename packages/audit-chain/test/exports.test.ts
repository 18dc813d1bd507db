import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';

/**
 * Every name @forge/audit-chain exports at runtime, written out: adding or removing an export is an API
 * decision (src/index.ts lists them), so a change to this list must be a deliberate one.
 */
const EXPORTS = [
  'AUDIT_ERROR_CODES',
  'AuditError',
  'DirLock',
  'EMPTY_ROOT',
  'GENESIS_HASH',
  'HASH_SIZE',
  'MAX_WITNESS_REQUEST_BYTES',
  'MemoryTree',
  'TILE_HEIGHT',
  'TILE_WIDTH',
  'TileHashes',
  'TileRows',
  'VERIFY_REASONS',
  'addCheckpointBody',
  'checkProof',
  'checkWitnessed',
  'consistencyProof',
  'cosignNote',
  'cosignerVerifierKey',
  'decodeCheckpoint',
  'decodeEntry',
  'eachLogLine',
  'encodeCheckpoint',
  'encodeEntry',
  'encodePrepared',
  'formatTreeCheckpoint',
  'generateSigningKeys',
  'inclusionProof',
  'leafHash',
  'logTree',
  'logTreeHead',
  'newTiles',
  'nodeHash',
  'noteKeyId',
  'noteVerifierKey',
  'openAuditLog',
  'openNote',
  'openWitness',
  'parseCheckpoint',
  'parseTreeCheckpoint',
  'parseVerifierKey',
  'prepareAppend',
  'readRegularFile',
  'reanchorAuditLog',
  'requestCosignatures',
  'signNote',
  'subtree',
  'tailLog',
  'tileData',
  'tileFiles',
  'tilePath',
  'treeHead',
  'verifyConsistency',
  'verifyInclusion',
  'verifyLog',
  'verifyTiles',
  'withDirLock',
  'witnessHttpHandler',
  'witnessLog',
  'writeTiles',
];

// Imported while the file is collected, not inside the test: on a busy machine loading the
// package and its dependencies can take longer than a fast test's limit, and that is not what is tested.
// By URL, not a literal specifier: the test typechecks before this package's own build.
const entry: Record<string, unknown> = await import(new URL('../dist/index.js', import.meta.url).href).catch((err: Error) => {
  throw new Error(`${err.message}: build first (pnpm turbo run build --filter=@forge/audit-chain)`);
});

it('the built entry exports exactly the listed names', () => {
  expect(
    Object.keys(entry).sort(),
    'the export list of @forge/audit-chain changed: if that is deliberate, update EXPORTS in test/exports.test.ts',
  ).toEqual(EXPORTS);
});

it('the ./json-scan entry exports the JSON validity scan alone, and it uses no Node API', async () => {
  const scan: Record<string, unknown> = await import(new URL('../dist/json-scan.js', import.meta.url).href);
  expect(Object.keys(scan)).toEqual(['isJsonValue']);
  // The operator console bundles this entry into a browser page: it and the files it imports
  // (a chunk the build shares with the main entry) reach no module but its own and no Node API.
  const seen = new Set<string>();
  const visit = (file: URL) => {
    if (seen.has(file.href)) return;
    seen.add(file.href);
    const text = readFileSync(file, 'utf8');
    expect(text, file.pathname).not.toMatch(/\brequire\(|\bBuffer\b|\bprocess\.|node:/);
    for (const m of text.matchAll(/\bfrom\s*"([^"]+)"/g)) {
      expect(m[1], `${file.pathname} imports ${m[1]}`).toMatch(/^\.\//);
      visit(new URL(m[1] as string, file));
    }
  };
  visit(new URL('../dist/json-scan.js', import.meta.url));
  const ok = (s: string) =>
    (scan.isJsonValue as (b: Uint8Array, f: number, t: number) => boolean)(new TextEncoder().encode(s), 0, Buffer.byteLength(s));
  expect([ok('{"a":[1,2.5e3,"x",true,null]}'), ok('{"a":}'), ok(' 1 '), ok('01')]).toEqual([true, false, true, false]);
});
