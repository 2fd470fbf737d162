#!/usr/bin/env bash
# Install the Debian packages a one-machine fake-GPU Slurm cluster needs (Slurm 22.05 on bookworm).
# Idempotent and fast: apt is only touched when a package is missing.
# Usage: deploy/slurm/install.sh
set -euo pipefail

# slurm-wlm-mysql-plugin gives slurmdbd its accounting_storage/mysql plugin (slurmdbd only recommends it,
# and we install without recommends). mariadb-client is for creating the accounting database.
PACKAGES=(slurm-wlm slurmctld slurmd slurm-client slurmdbd slurm-wlm-mysql-plugin munge mariadb-client)

missing=()
for pkg in "${PACKAGES[@]}"; do
    # dpkg-query prints "install ok installed" only for fully installed packages.
    if [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" != "install ok installed" ]]; then
        missing+=("$pkg")
    fi
done

if ((${#missing[@]} == 0)); then
    echo "slurm packages already installed"
    exit 0
fi

install() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; }

echo "installing: ${missing[*]}"
# Refresh the package lists only when they were never fetched or are too old to install from.
if compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    install || { apt-get update && install; }
else
    apt-get update
    install
fi

# The munge postinst normally creates the key; make sure it exists (e.g. when the postinst was skipped).
if [[ ! -f /etc/munge/munge.key ]]; then
    mungekey --create
    chown munge:munge /etc/munge/munge.key
    chmod 0600 /etc/munge/munge.key
fi
