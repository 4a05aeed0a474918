#!/usr/bin/env bash
# slim.sh on|off: takes bench/results out of the working tree and the index for a device call (the call carries the
# tracked tree, ~43 MB, plus `carry`, 64 MiB at most), and puts it back. Never commit or build while it is on.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  on)  [ -e /tmp/kda_slim_results ] && { echo "slim: already on" >&2; exit 1; }
       mv bench/results /tmp/kda_slim_results && git rm -r -q --cached bench/results && echo "slim on" ;;
  off) [ -e /tmp/kda_slim_results ] || { echo "slim: not on" >&2; exit 1; }
       mv /tmp/kda_slim_results bench/results && git reset -q -- bench/results && echo "slim off"
       git status --short | head ;;
  *) echo "usage: slim.sh on|off" >&2; exit 2 ;;
esac
