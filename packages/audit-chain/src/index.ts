/**
 * @forge/audit-chain — an append-only, hash-chained, tamper-evident log.
 *
 * Public API. Everything exported here is a deliberate, documented decision; internals are not
 * reachable from outside the package.
 */

export { type Checkpoint, generateSigningKeys, type KeyInput, parseCheckpoint } from './checkpoint.js';
export {
  type CheckpointFields,
  type DecodedCheckpoint,
  type DecodedEntry,
  decodeCheckpoint,
  decodeEntry,
  type EncodedEntry,
  type EntryFields,
  encodeCheckpoint,
  encodeEntry,
  encodePrepared,
  type PreparedAppend,
  prepareAppend,
} from './encode.js';
export { AUDIT_ERROR_CODES, AuditError, type AuditErrorCode } from './errors.js';
export { type AuditEntry, GENESIS_HASH, VERIFY_REASONS, type VerifyReason } from './format.js';
export type { JsonValue } from './ijson.js';
/** A growing tree kept as C2SP tiles fill (the right edge per tile level): what a store of the log's tree keeps between appends. */
export { logTreeHead } from './leaf-scan.js';
export { DirLock, type LockOptions, withDirLock } from './lock.js';
export { openAuditLog, reanchorAuditLog } from './log.js';
/** A log file's Merkle tree, read from its segments' lines. */
export { eachLine as eachLogLine, logTree } from './log-tree.js';
export type {
  AppendResult,
  AuditLog,
  EntriesOptions,
  LogHead,
  OpenAuditLogOptions,
  Reanchored,
  RotateResult,
  WriterIo,
} from './log-types.js';
/** The log as an RFC 6962 Merkle tree: tree heads, inclusion and consistency proofs, their verification. */
export {
  consistencyProof,
  EMPTY_ROOT,
  HASH_SIZE,
  inclusionProof,
  leafHash,
  MemoryTree,
  nodeHash,
  type TreeHashes,
  treeHead,
  verifyConsistency,
  verifyInclusion,
} from './merkle.js';
/** Signed notes (C2SP signed-note) and the tree checkpoints they carry (C2SP tlog-checkpoint). */
export {
  cosignerVerifierKey,
  cosignNote,
  formatTreeCheckpoint,
  type NoteSignature,
  type NoteSigner,
  noteKeyId,
  noteVerifierKey,
  type OpenedNote,
  openNote,
  parseTreeCheckpoint,
  parseVerifierKey,
  signNote,
  type TreeCheckpoint,
} from './note.js';
/** Checking an inclusion or consistency proof against a signed tree checkpoint, offline. */
export { type ConsistencyProofDoc, checkProof, type InclusionProofDoc, type ProofDoc, type ProofVerdict } from './proof.js';
export { readRegularFile } from './regular-file.js';
export { type TailOptions, tailLog } from './tail.js';
export { type FullTile, subtree, TileRows } from './tile-rows.js';
/** The tree's hashes as C2SP tlog-tiles: paths, the tiles a growth adds, writing them, reading a tree from them. */
export {
  newTiles,
  TILE_HEIGHT,
  TILE_WIDTH,
  type Tile,
  TileHashes,
  type TileSource,
  tileData,
  tileFiles,
  tilePath,
  writeTiles,
} from './tiles.js';
export { verifyLog } from './verify.js';
export type { FirstBad, VerifyOptions, VerifyResult } from './verify-result.js';
/** Checking the tree beside a log (its tiles and tree checkpoint) against the log's own lines. */
export { type TilesVerdict, verifyTiles } from './verify-tiles.js';
/** A witness (C2SP tlog-witness) and a log asking witnesses to cosign its checkpoints. */
export {
  addCheckpointBody,
  MAX_WITNESS_REQUEST_BYTES,
  openWitness,
  type Witness,
  type WitnessAnswer,
  type WitnessedLog,
  type WitnessOptions,
  type WitnessRecord,
  witnessHttpHandler,
} from './witness.js';
export { type CosignResult, checkWitnessed, requestCosignatures, type WitnessEndpoint, witnessLog } from './witness-client.js';
