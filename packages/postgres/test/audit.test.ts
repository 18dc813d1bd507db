/**
 * The audit store conformance suite of @forge/conformance against the Postgres audit log: the same
 * behaviour, concurrency (8 writer processes on one database: nothing lost or forked), kill -9 and
 * bad-input tests as the file log, verified by exporting the database and running the file
 * verifier on the export.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyLog } from '@forge/audit-chain';
import { describeAuditStore } from '@forge/conformance/audit';
import { exportAuditLog, openPostgresAuditLog } from '../src/index.js';
import { DIST, usePostgres } from './helpers.js';

const MAX_ENTRY_BYTES = 64 * 1024;
const pgs = usePostgres();

describeAuditStore('postgres (openPostgresAuditLog)', async () => {
  const url = await pgs.server().database();
  const dir = await mkdtemp(join(tmpdir(), 'forge-pgaudit-'));
  const options = { maxEntryBytes: MAX_ENTRY_BYTES };
  return {
    open: () => openPostgresAuditLog(url, options),
    child: { module: DIST, export: 'openPostgresAuditLog', args: [url, options] },
    verify: async () => {
      const path = join(dir, `export-${Date.now()}-${Math.random().toString(36).slice(2)}.log`);
      await exportAuditLog(url, path);
      return verifyLog(path);
    },
    maxEntryBytes: MAX_ENTRY_BYTES,
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
});
