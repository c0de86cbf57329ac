#!/usr/bin/env bash
# The timeout tutorial: two clients (separate connect/read timeouts, and one
# total timeout) against a local HTTP server, wrapped by `netchaos run` under
# the connect-timeout, slow-connect, read-timeout and slow-headers profiles.
# See docs/timeouts.md.
#
# usage: scripts/timeouts.sh [PROFILE...]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import requests' 2>/dev/null || { echo "timeouts.sh: needs Python's requests (pip install requests)" >&2; exit 1; }
cargo build --release --quiet --bin netchaos
NC=$PWD/target/release/netchaos

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DIR=$(mktemp -d)
echo "hello" >"$DIR/index.html"
python3 -m http.server "$PORT" --bind 127.0.0.1 --directory "$DIR" >/dev/null 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; rm -rf "$DIR"' EXIT
sleep 0.5

profiles=("$@")
((${#profiles[@]})) || profiles=(connect-timeout slow-connect read-timeout slow-headers)
for p in "${profiles[@]}"; do
  echo "$p: $("$NC" check "$p" 2>/dev/null | sed -n 's/^profile builtin:[^:]*: //p')"
  # A fixed seed makes slow-connect's jitter the same on every run.
  "$NC" -qq --seed 1 run -p "$p" -- python3 scripts/timeout_clients.py "http://127.0.0.1:$PORT/"
  echo
done
