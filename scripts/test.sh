#!/usr/bin/env bash
# Runs every test of the workspace, after installing what a fresh machine lacks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
pnpm test
