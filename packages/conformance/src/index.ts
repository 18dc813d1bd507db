/**
 * forge's store conformance suites: one per store interface, each run against every
 * implementation (files here, PostgreSQL in @forge/postgres), and the throwaway PostgreSQL
 * server tests start.
 */
export {};
