import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openAuditLog, verifyLog } from '@forge/audit-chain';
import { describeAuditStore } from '../src/audit.js';

const MAX_ENTRY_BYTES = 64 * 1024;

// The file log of @forge/audit-chain: a fresh directory per test; children open it by path.
describeAuditStore('file log (openAuditLog)', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'forge-audit-conf-'));
  const path = join(dir, 'audit.log');
  const options = { maxEntryBytes: MAX_ENTRY_BYTES };
  return {
    open: () => openAuditLog(path, options),
    child: { module: '@forge/audit-chain', export: 'openAuditLog', args: [path, options] },
    verify: () => verifyLog(path),
    maxEntryBytes: MAX_ENTRY_BYTES,
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
});
