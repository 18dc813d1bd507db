#!/usr/bin/env bash
# Runs a command on a copy of this checkout as an ordinary account, the way most people run forge:
# as themselves, beside hundreds of their own processes and threads (RLIMIT_NPROC counts every
# task of the user, and a desktop's browser alone has hundreds). CI's second pass; run it as root.
#
#   bash scripts/as-user.sh                      # the README's test command, then `forge demo`
#   bash scripts/as-user.sh pnpm -F @forge/sandbox test
#
# The account (FORGE_USER, default forge-ci) is created when missing and gets a copy of the
# working tree (tracked and untracked files, no node_modules: the README's commands install them
# as that user). Its background load (FORGE_USER_LOAD threads, default 500, plus 100 processes)
# runs for as long as the command does, and everything of the account is ended afterwards.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then
  echo "as-user: run this as root: it creates the account it runs the command as" >&2
  exit 2
fi
user=${FORGE_USER:-forge-ci}
threads=${FORGE_USER_LOAD:-500}
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
home=$(getent passwd "$user" | cut -d: -f6)
dest="$home/forge"

stop_user() { pkill -KILL -u "$user" 2>/dev/null || true; }
trap stop_user EXIT
stop_user
rm -rf "$dest"
mkdir -p "$dest"
(cd "$here" && git ls-files -z --cached --others --exclude-standard | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) |
  tar -xf - -C "$dest"
chown -R "$user:" "$dest"

# The load: one process holding $threads sleeping threads, and 100 sleeping processes.
# The machine's own network settings stay (which certificate authorities to trust, which proxy to
# use): an account on this machine has them too, and npm needs them to reach its registry.
machine=()
for v in NODE_EXTRA_CA_CERTS SSL_CERT_FILE SSL_CERT_DIR HTTPS_PROXY HTTP_PROXY NO_PROXY https_proxy http_proxy no_proxy; do
  if [ -n "${!v:-}" ]; then machine+=("$v=${!v}"); fi
done
as_user() { runuser -u "$user" -- env -i HOME="$home" USER="$user" PATH="$PATH" LANG=C.UTF-8 CI="${CI:-}" TERM="${TERM:-dumb}" "${machine[@]}" "$@"; }
as_user python3 -c "
import threading, time, subprocess
for _ in range(100): subprocess.Popen(['sleep', '86400'])
for _ in range($threads): threading.Thread(target=time.sleep, args=(86400,), daemon=True).start()
open('$home/.load-ready', 'w').close()
time.sleep(86400)
" 2>/dev/null & # runuser reports the load's SIGKILL at the end ("Killed"): that is the plan, not news
for _ in $(seq 600); do [ -e "$home/.load-ready" ] && break; sleep 0.1; done
rm -f "$home/.load-ready"
tasks=$(ps -L -u "$user" --no-headers | wc -l)
echo "as-user: $user (uid $(id -u "$user")) has $tasks processes and threads running; RLIMIT_NPROC $(as_user bash -c 'ulimit -u')"

status=0
if [ "$#" -gt 0 ]; then
  as_user bash -c 'cd "$1" && shift && exec "$@"' as-user "$dest" "$@" || status=$?
else
  echo "--- test as $user (the README's test command)"
  as_user bash -c 'cd "$1" && bash scripts/test.sh' as-user "$dest" || status=$?
  as_user bash -c 'cd "$1" && node scripts/test-summary.mjs' as-user "$dest" || status=1
  echo "--- demo as $user (the README's demo command)"
  as_user bash -c 'cd "$1" && bash scripts/demo.sh' as-user "$dest" || status=1
fi
stop_user
rm -rf "$dest"
exit "$status"
