/**
 * The audit log's Merkle tree kept in the database (audit-chain SPEC.md section 9.4), the same
 * tree the file log keeps beside itself: full C2SP tiles in `forge_audit_tiles`, written once, in
 * the transaction of the batch that completes them; the tree's right edge (per tile level, the
 * hashes not yet in a full tile) on the head row, updated with it; and at each checkpoint a tree
 * checkpoint signed with the log's key in `forge_audit_tree_checkpoints`. Partial tiles are not
 * stored: a partial tile of any size the tree has reached is the first hashes of its full tile,
 * or of the right edge while it is not full. Tiles read from here are byte for byte the file
 * log's for the same entries.
 */
import { formatTreeCheckpoint, HASH_SIZE, leafHash, type NoteSigner, signNote, TILE_WIDTH, TileRows } from '@forge/audit-chain';
import type pg from 'pg';
import type { Migration } from './migration.js';

/** Migration 2: the tree's tables and the head row's right edge. */
export const AUDIT_TREE_MIGRATION: Migration = {
  version: 2,
  name: 'audit log Merkle tree',
  sql: `
    -- Full tiles of the audit log's Merkle tree (C2SP tlog-tiles): 256 hashes each, never changed.
    CREATE TABLE forge_audit_tiles (
      level integer NOT NULL CHECK (level >= 0),
      idx bigint NOT NULL CHECK (idx >= 0),
      hashes bytea NOT NULL CHECK (octet_length(hashes) = ${TILE_WIDTH * HASH_SIZE}),
      PRIMARY KEY (level, idx)
    );
    -- The tree's right edge, updated with the head it describes: leaves counted, and per tile
    -- level the hashes not yet in a full tile (concatenated).
    ALTER TABLE forge_audit_head
      ADD COLUMN tree_size bigint NOT NULL DEFAULT 0,
      ADD COLUMN tree_rows bytea[] NOT NULL DEFAULT '{}';
    -- Signed tree checkpoints (C2SP signed notes), newest last.
    CREATE TABLE forge_audit_tree_checkpoints (
      id bigserial PRIMARY KEY,
      size bigint NOT NULL CHECK (size >= 0),
      note text NOT NULL
    );
    CREATE TRIGGER forge_audit_tiles_append_only BEFORE UPDATE OR DELETE ON forge_audit_tiles
      FOR EACH ROW EXECUTE FUNCTION forge_audit_append_only();
    CREATE TRIGGER forge_audit_tiles_no_truncate BEFORE TRUNCATE ON forge_audit_tiles
      FOR EACH STATEMENT EXECUTE FUNCTION forge_audit_append_only();
    CREATE TRIGGER forge_audit_tree_checkpoints_append_only BEFORE UPDATE OR DELETE ON forge_audit_tree_checkpoints
      FOR EACH ROW EXECUTE FUNCTION forge_audit_append_only();
  `,
};

/** The head row's tree columns, as read. */
export interface TreeColumns {
  tree_size: string;
  tree_rows: Buffer[] | null;
}

/** The tree a head row describes. */
function rowsOf(head: TreeColumns): TileRows {
  const rows = new TileRows();
  rows.size = Number(head.tree_size);
  rows.levels = (head.tree_rows ?? []).map((b) => {
    const out: Uint8Array[] = [];
    for (let i = 0; i < b.length; i += HASH_SIZE) out.push(b.subarray(i, i + HASH_SIZE));
    return out;
  });
  if (rows.levels.length === 0) rows.levels = [[]];
  return rows;
}

/** The head row's tree columns for `rows`. */
function columnsOf(rows: TileRows): Buffer[] {
  return rows.levels.map((r) => Buffer.concat(r));
}

const INSERT_TILES =
  'INSERT INTO forge_audit_tiles (level, idx, hashes) SELECT * FROM unnest($1::int[], $2::bigint[], $3::bytea[]) ON CONFLICT DO NOTHING';

/**
 * Within a batch's transaction (the head row locked): the tree after the batch's lines (each with
 * its newline) are appended to the `seq` entries already there. Entries the tree has not counted
 * yet (a database from before the tree, written by an older forge) are read first. The full
 * tiles completed are inserted; the columns to store on the head row are returned.
 */
export async function advanceTree(c: pg.PoolClient, head: TreeColumns & { seq: string }, leaves: readonly Buffer[]): Promise<Buffer[]> {
  const rows = rowsOf(head);
  const tiles: { level: number; index: number; data: Buffer }[] = [];
  const full = (t: { level: number; index: number; data: Buffer }) => tiles.push(t);
  const seq = Number(head.seq);
  for (let from = rows.size; from < seq; ) {
    const r = await c.query<{ line: string }>('SELECT line FROM forge_audit_entries WHERE seq > $1 ORDER BY seq LIMIT 10000', [from]);
    if (r.rows.length === 0) break;
    for (const { line } of r.rows) rows.add(leafHash(Buffer.from(line.slice(0, -1), 'utf8')), full);
    from = rows.size;
  }
  for (const leaf of leaves) rows.add(leaf, full);
  if (tiles.length > 0) await c.query(INSERT_TILES, [tiles.map((t) => t.level), tiles.map((t) => t.index), tiles.map((t) => t.data)]);
  return columnsOf(rows);
}

/**
 * Within a checkpoint's transaction: the tree checkpoint of the head's tree, signed by `signer`,
 * recorded; returns it (undefined without a signer, or before the tree counts every entry).
 */
export async function recordTreeCheckpoint(
  c: pg.PoolClient,
  head: TreeColumns & { seq: string },
  origin: string,
  signer: NoteSigner | undefined,
): Promise<string | undefined> {
  if (!signer || head.tree_size !== head.seq) return undefined;
  const rows = rowsOf(head);
  const note = signNote(formatTreeCheckpoint({ origin, size: rows.size, root: rows.root() }), [signer]);
  await c.query('INSERT INTO forge_audit_tree_checkpoints (size, note) VALUES ($1, $2)', [rows.size, note]);
  return note;
}

/** The tree kept in a database, read as C2SP tiles and the newest tree checkpoint. */
export interface PostgresTiles {
  /** A tile's bytes (`width` hashes), or undefined when the tree has not reached it. */
  tile(level: number, index: number, width: number): Promise<Buffer | undefined>;
  /** The newest signed tree checkpoint, if any. */
  checkpoint(): Promise<string | undefined>;
}

/** Reads the tree `pool`'s audit log keeps (tiles and tree checkpoints). */
export function postgresTiles(pool: pg.Pool): PostgresTiles {
  return {
    async tile(level, index, width) {
      if (!Number.isSafeInteger(level) || !Number.isSafeInteger(index) || level < 0 || index < 0 || width < 1 || width > TILE_WIDTH)
        return undefined;
      const r = await pool.query<{ hashes: Buffer }>('SELECT hashes FROM forge_audit_tiles WHERE level = $1 AND idx = $2', [level, index]);
      const hashes = r.rows[0]?.hashes;
      if (hashes) return hashes.subarray(0, width * HASH_SIZE);
      // Not full yet: the right edge holds it while its index is the level's next.
      const h = (await pool.query<TreeColumns>('SELECT tree_size, tree_rows FROM forge_audit_head WHERE id = 1')).rows[0];
      if (!h) return undefined;
      const rows = rowsOf(h);
      const nodes = Math.floor(rows.size / TILE_WIDTH ** level);
      const row = rows.levels[level] ?? [];
      if (Math.floor(nodes / TILE_WIDTH) !== index || row.length < width) return undefined;
      return Buffer.concat(row.slice(0, width));
    },
    async checkpoint() {
      const r = await pool.query<{ note: string }>('SELECT note FROM forge_audit_tree_checkpoints ORDER BY id DESC LIMIT 1');
      return r.rows[0]?.note;
    },
  };
}
