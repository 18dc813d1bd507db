#!/usr/bin/env bash
# Runs every test of the workspace, after installing what a fresh machine lacks: each package's
# tests (which build everything first), then every README example against that build
# (scripts/test/readme-examples.test.ts). Both run; either failing fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
status=0
pnpm test || status=$?
# The examples run the built packages: built for the tests already (turbo's cache), unless a failing test stopped turbo first.
{ pnpm build >/dev/null && pnpm exec vitest run --config scripts/test/vitest.config.ts; } || status=$?
exit "$status"
