/** The escape tests (escape.cases.ts) in sandboxes built ahead of time, as forge's calls mostly run. */
import { escapeTests } from './escape.cases.js';

escapeTests('prebuilt');
