/**
 * forge's operator console: a page on loopback for the runs, the audit log (verified in the
 * browser), approvals and pins, behind a launch token, a session cookie, Host, Origin and CSRF
 * checks and a strict Content-Security-Policy. The `forge` app provides its services.
 */
export { ConsoleAccess, SECURITY_HEADERS } from './access.js';
export { AuditIndex, type CallQuery } from './audit-index.js';
export { callRow } from './calls.js';
export { type Console, ConsoleError, type ConsoleOptions, startConsole } from './server.js';
export type { ArtifactView, ConsoleServices, DecisionView, ReviewView, RunView } from './services.js';
export type * from './views.js';
export { type FirstBad, type LogSource, type Reason, type Verdict, type VerifyOptions, verifyLog } from './web/verify.js';
