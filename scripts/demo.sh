#!/usr/bin/env bash
# The forge demo: installs what a fresh machine lacks, builds, and runs scripts/demo.mjs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
pnpm --silent build >/dev/null
node scripts/demo.mjs
