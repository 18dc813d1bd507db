/** The escape tests (escape.cases.ts) with warm interpreters: every Python run takes one. */
import { escapeTests } from './escape.cases.js';

escapeTests('warm');
