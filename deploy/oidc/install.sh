#!/usr/bin/env bash
# Installs the test OIDC provider's one dependency (oidc-provider, pinned in package-lock.json)
# into deploy/oidc/node_modules. Idempotent: does nothing when the lock file has not changed.
set -euo pipefail
cd "$(dirname "$0")"
command -v npm >/dev/null || { echo "[oidc] npm not found: install nodejs and npm (Debian: apt-get install nodejs npm)"; exit 1; }
stamp=node_modules/.gpupool-lock
if [ -f "$stamp" ] && cmp -s package-lock.json "$stamp"; then exit 0; fi
npm ci --no-audit --no-fund --loglevel=error
cp package-lock.json "$stamp"
