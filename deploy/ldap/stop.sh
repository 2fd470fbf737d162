#!/usr/bin/env bash
# Stop the slapd deploy/ldap/start.sh started in RUN_DIR (its data stays until RUN_DIR is removed).
# Usage: deploy/ldap/stop.sh RUN_DIR
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 RUN_DIR" >&2; exit 2; }
PIDFILE=$(realpath "$1")/slapd.pid
[[ -f $PIDFILE ]] || exit 0
PID=$(cat "$PIDFILE")
kill "$PID" 2>/dev/null || exit 0
# slapd removes its pid file when it has shut down; wait for the process itself to be gone.
for _ in $(seq 150); do
    kill -0 "$PID" 2>/dev/null || exit 0
    sleep 0.2
done
kill -9 "$PID" 2>/dev/null || true
