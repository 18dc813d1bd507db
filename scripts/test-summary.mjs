#!/usr/bin/env node
// Prints one closing line with the test counts of every package and of the README examples (from the JSON reports vitest
// writes in CI): "tests: N passed, N failed". Exits 1 when a report is missing or counts a failure.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;

/**
 * A report's failures: its failed tests, and each test file that failed without a failed test (an
 * error while loading it, or in a beforeAll), which would otherwise count as nothing at all.
 */
function failures(r) {
  let n = 0;
  for (const f of r.testResults ?? []) {
    const file = f.name?.startsWith(root) ? f.name.slice(root.length) : f.name;
    const failedTests = (f.assertionResults ?? []).filter((a) => a.status === 'failed');
    for (const a of failedTests) {
      n++;
      console.error(`failed: ${file} › ${a.fullName ?? a.title}`);
      const first = (a.failureMessages ?? [])[0];
      if (first) console.error(excerpt(first));
    }
    if (f.status === 'failed' && failedTests.length === 0) {
      n++;
      console.error(`failed: ${file} (the file itself: ${(f.message ?? 'no message').split('\n')[0].slice(0, 300)})`);
    }
  }
  // numFailedTests also counts failures the per-file list may not name; never report fewer than it.
  return Math.max(n, r.numFailedTests ?? 0);
}
/**
 * A failure's message without its stack: the first line, and the expected/received lines under it
 * (an assertion's one-line summary cuts long strings short, which is often where the difference is).
 */
function excerpt(message) {
  const lines = message.split('\n').filter((l) => l.trim() !== '' && !/^\s+at /.test(l));
  return lines
    .slice(0, 12)
    .map((l) => `  ${l.slice(0, 400)}`)
    .join('\n');
}
let passed = 0;
let failed = 0;
let missing = 0;
for (const group of ['packages', 'apps']) {
  const dir = join(root, group);
  if (!existsSync(dir)) continue;
  for (const name of readdirSync(dir)) {
    const pkg = join(dir, name);
    if (!existsSync(join(pkg, 'package.json'))) continue;
    const scripts = JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8')).scripts ?? {};
    if (!scripts.test) continue;
    const report = join(pkg, 'test-results.json');
    if (!existsSync(report)) {
      console.error(`no test report from ${group}/${name} (expected ${report})`);
      missing++;
      continue;
    }
    const r = JSON.parse(readFileSync(report, 'utf8'));
    passed += r.numPassedTests;
    failed += failures(r);
  }
}
// The README examples (scripts/test), run by scripts/test.sh after the packages' tests.
const examples = join(root, 'scripts', 'test', 'test-results.json');
if (existsSync(examples)) {
  const r = JSON.parse(readFileSync(examples, 'utf8'));
  passed += r.numPassedTests;
  failed += failures(r);
} else {
  console.error(`no test report from the README examples (expected ${examples})`);
  missing++;
}
console.log(`tests: ${passed} passed, ${failed} failed`);
process.exit(failed > 0 || missing > 0 || passed === 0 ? 1 : 0);
