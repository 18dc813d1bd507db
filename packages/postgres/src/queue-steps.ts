/** The named steps of the Postgres queue (crash tests): each right after its statement. */
export const POSTGRES_QUEUE_STEPS = {
  publish: ['publish.insert', 'publish.send', 'publish.commit', 'publish.notify'],
  claim: ['claim.fetch', 'claim.mark', 'claim.commit'],
  lease: ['lease.armed'],
  renew: ['renew.update'],
  note: ['note.update'],
  finish: ['finish.mark', 'finish.complete', 'finish.commit', 'finish.notify'],
  recover: ['recover.lock', 'recover.engine', 'recover.commit'],
} as const;

/** One named step of POSTGRES_QUEUE_STEPS. */
export type PostgresQueueStep = (typeof POSTGRES_QUEUE_STEPS)[keyof typeof POSTGRES_QUEUE_STEPS][number];
