/**
 * @forge/postgres — forge's stores in one PostgreSQL database, for many front-ends and workers.
 */
export {};
