/**
 * @forge/queue — the job queue interface forge dispatches calls through, and its file-native
 * implementation for many processes on one host.
 */
export type * from './types.js';
