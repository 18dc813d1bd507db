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
