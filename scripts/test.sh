#!/usr/bin/env bash
# Runs every test of the workspace, after installing what a fresh machine lacks: each package's
# tests (which build everything first), then every README example against that build
# (scripts/test/readme-examples.test.ts). Both run; either failing fails the script. In CI it
# also fails when the tests left anything of theirs (forge-*) in the temporary directories.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# This user's forge-* entries in the temporary directories, one per line.
ours() {
  for d in "${TMPDIR:-/tmp}" /tmp /dev/shm; do
    if [ -d "$d" ]; then find "$d" -mindepth 1 -maxdepth 1 -name 'forge-*' -user "$(id -u)" 2>/dev/null || true; fi
  done | sort -u
}
before=$(ours)
status=0
pnpm test || status=$?
# The examples run the built packages: built for the tests already (turbo's cache), unless a failing test stopped turbo first.
{ pnpm build >/dev/null && pnpm exec vitest run --config scripts/test/vitest.config.ts; } || status=$?
if [ -n "${CI:-}" ]; then
  left=$(comm -13 <(printf '%s\n' "$before") <(ours) | sed '/^$/d')
  if [ -n "$left" ]; then
    echo "the tests left these in the temporary directories (a test owns what it makes: remove it in its own teardown):" >&2
    echo "$left" >&2
    status=1
  fi
fi
exit "$status"
