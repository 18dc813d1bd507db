#!/usr/bin/env bash
# Installs what forge needs on a fresh Debian/Ubuntu machine with Node >= 20: pnpm (exact
# version from package.json), bubblewrap, python3 (interop tests), PostgreSQL (the Postgres store's
# tests start their own throwaway server), Chromium (the console's browser tests), then the
# workspace packages.
# Safe to run again: it only installs what is missing. Used by the README quick start and CI.
# `--demo`: what `forge demo` needs only (no PostgreSQL), so an ordinary user with bubblewrap and
# python3 installed can run the demo without root.
set -euo pipefail
demo=false
[ "${1:-}" = "--demo" ] && demo=true
cd "$(dirname "$0")/.."

PNPM_VERSION=$(node -p "require('./package.json').packageManager.split('@')[1]")
need_root() {
  echo "forge setup: $1 is missing and this is not root." >&2
  echo "  install it with: sudo $2" >&2
  exit 2
}

node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then
  echo "forge setup: Node >= 20.19 is required (found $(node --version 2>/dev/null || echo none))." >&2
  exit 2
fi

if ! command -v pnpm >/dev/null 2>&1 || [ "$(pnpm --version 2>/dev/null)" != "$PNPM_VERSION" ]; then
  if [ "$(id -u)" -eq 0 ]; then
    npm install -g "pnpm@$PNPM_VERSION" >/dev/null
  else
    need_root "pnpm $PNPM_VERSION" "npm install -g pnpm@$PNPM_VERSION"
  fi
fi

apt_missing=()
command -v bwrap >/dev/null 2>&1 || apt_missing+=(bubblewrap)
command -v python3 >/dev/null 2>&1 || apt_missing+=(python3)
# As root, sandboxes drop to their own uid (setpriv) and stage what it cannot reach (unshare, mount).
if [ "$(id -u)" -eq 0 ]; then
  { command -v setpriv && command -v unshare; } >/dev/null 2>&1 || apt_missing+=(util-linux)
  command -v mount >/dev/null 2>&1 || apt_missing+=(mount)
fi
# The Postgres store's tests start a throwaway PostgreSQL server (initdb in a temp dir): Debian
# keeps the server binaries off PATH, in /usr/lib/postgresql/<major>/bin.
if ! $demo && ! command -v initdb >/dev/null 2>&1 && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  apt_missing+=(postgresql)
fi
# The egress proxy's run certificates are checked by real TLS clients (curl, OpenSSL's verify).
if ! $demo; then
  command -v curl >/dev/null 2>&1 || apt_missing+=(curl)
  command -v openssl >/dev/null 2>&1 || apt_missing+=(openssl)
fi
# The operator console's tests drive a real browser (Debian's Chromium, through playwright-core).
if ! $demo; then
  { command -v chromium || [ -n "${FORGE_CHROMIUM:-}" ]; } >/dev/null 2>&1 || apt_missing+=(chromium)
fi
# The audit log's Merkle proofs are checked by the Go checksum database's own code (sumdb/tlog).
if ! $demo; then
  command -v go >/dev/null 2>&1 || apt_missing+=(golang-go)
  [ -d /usr/share/gocode/src/golang.org/x/mod/sumdb/tlog ] || apt_missing+=(golang-golang-x-mod-dev)
fi
if [ "${#apt_missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_missing[@]}" >/dev/null
  else
    need_root "${apt_missing[*]}" "apt-get install -y ${apt_missing[*]}"
  fi
fi

if [ "${CI:-}" = "true" ]; then
  pnpm install --frozen-lockfile
else
  pnpm install --frozen-lockfile --reporter=silent
fi
