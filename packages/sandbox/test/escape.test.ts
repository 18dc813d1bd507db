/** The escape tests (escape.cases.ts) in sandboxes built for their run. */
import { escapeTests } from './escape.cases.js';

escapeTests('fresh');
