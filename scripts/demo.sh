#!/usr/bin/env bash
# The forge demo: installs what a fresh machine lacks, builds the workspace, then runs `forge demo`
# (apps/forge): an MCP client forges a tool, calls it sandboxed, meets the schema and the policy,
# and the audit log catches a tampered copy. It works in scratch directories it removes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --demo
echo "forge: building the workspace…" >&2
pnpm --silent build >/dev/null
node apps/forge/dist/cli.js demo
