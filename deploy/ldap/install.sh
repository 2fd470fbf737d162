#!/usr/bin/env bash
# Install Debian's OpenLDAP server and tools (the tests start a private slapd: deploy/ldap/start.sh)
# and the headers python-ldap (django-auth-ldap) builds against.
# Idempotent and fast: apt is only touched when a package is missing.
# Usage: deploy/ldap/install.sh
set -euo pipefail

# slapd: the server; ldap-utils: ldapadd/ldapmodify/ldapsearch; openssl: the StartTLS certificate;
# libldap2-dev + libsasl2-dev: python-ldap is built from source by pip.
PACKAGES=(slapd ldap-utils openssl libldap2-dev libsasl2-dev)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" != "install ok installed" ]]; then
        missing+=("$pkg")
    fi
done

if ((${#missing[@]} == 0)); then
    echo "ldap packages already installed"
    exit 0
fi

# slapd's postinst would build a system directory from debconf answers; we never use it (the tests run
# their own slapd from a cn=config we generate), so skip its configuration questions.
install() {
    echo "slapd slapd/no_configuration boolean true" | debconf-set-selections
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

echo "installing: ${missing[*]}"
if compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    install || { apt-get update && install; }
else
    apt-get update
    install
fi
