#!/usr/bin/env bash
# Let the sandbox's per-job uids run this Python: a team's code runs as its own unprivileged
# uid with the worker's interpreter, so every folder above the interpreter (the venv and the
# install its symlink points to, e.g. under a 0700 /root or a mktemp folder) needs o+x.
# Only root can create those uids, so only root needs this; anyone else: nothing to do.
#   .ci/open-python.sh PATH/TO/bin/python
set -euo pipefail
[ "$(id -u)" = 0 ] || exit 0
for f in "$(readlink -f "$1")" "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; do
  d=$(dirname "$f")
  while [ "$d" != / ]; do
    chmod o+x "$d"
    d=$(dirname "$d")
  done
done
