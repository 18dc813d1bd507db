/**
 * @forge/queue — the job queue interface forge dispatches calls through, and its file-native
 * implementation for many processes on one host.
 */

export { QUEUE_ERROR_CODES, QueueError, type QueueErrorCode } from './errors.js';
export { type FileQueueOptions, openFileQueue } from './file.js';
export { FILE_QUEUE_STEPS, type FileQueueStep } from './layout.js';
export { checkId, checkJson, checkWorker, JOB_ID, jsonText, MAX_PAYLOAD_BYTES } from './names.js';
export { filePresence, looksAlive, type Member, PRESENCE_STALE_MS, type PresenceStore } from './presence.js';
export type * from './types.js';
