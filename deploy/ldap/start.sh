#!/usr/bin/env bash
# Start a private OpenLDAP server (Debian's slapd) under RUN_DIR, on a free port of 127.0.0.1, with no
# systemd: the tests' and the benchmark's directory (docs/identity.md describes the tree).
#
# Usage: deploy/ldap/start.sh RUN_DIR [EXTRA.ldif]
#   EXTRA.ldif (optional) is loaded with slapadd before the server starts (fast bulk loads: bench).
#   Progress goes to stderr; stdout gets shell assignments for the caller (also in RUN_DIR/ldap.env):
#     LDAP_URI LDAP_PORT LDAP_SUFFIX LDAP_ADMIN_DN LDAP_ADMIN_PASSWORD LDAP_BIND_DN LDAP_BIND_PASSWORD
#     LDAP_CA_FILE
#   Stop with deploy/ldap/stop.sh RUN_DIR.
#
# What runs: cn=config made by slapadd from a generated LDIF; one mdb database, suffix dc=centre,dc=example;
#   the admin DN cn=admin,<suffix> (rootdn) writes; the service account cn=gpupool,ou=services,<suffix>
#   (what gpupool binds as) reads everything but passwords. Groups are plain groupOfNames (member: DN),
#   found by searching (member=<user DN>): no memberOf overlay, which most directories (and AD's
#   memberOf) make unnecessary for a search. The ppolicy overlay with a default policy (pwdLockout) is
#   on: a user with pwdAccountLockedTime set is locked — slapd refuses their bind, and the portal's
#   sync reads the attribute (GPUPOOL_LDAP_DISABLED_FILTER=(pwdAccountLockedTime=*)). Size limit 500
#   per search, unlimited in total through paged results (what a real directory enforces).
#   StartTLS with a self-signed certificate for 127.0.0.1 (RUN_DIR/tls/cert.pem is also the CA file).
#
# Environment: LDAP_PORT (a free port), LDAP_ADMIN_PASSWORD (admin-secret),
#   LDAP_BIND_PASSWORD (gpupool-secret), LDAP_START_TIMEOUT (30 s).
set -euo pipefail

[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: $0 RUN_DIR [EXTRA.ldif]" >&2; exit 2; }
mkdir -p "$1"
RUN=$(realpath "$1")
EXTRA=${2:-}
die() { echo "start.sh: $*" >&2; exit 1; }
command -v slapd >/dev/null || [[ -x /usr/sbin/slapd ]] || die "slapd is not installed (deploy/ldap/install.sh)"
export PATH=$PATH:/usr/sbin

SUFFIX=dc=centre,dc=example
ADMIN_DN=cn=admin,$SUFFIX
ADMIN_PW=${LDAP_ADMIN_PASSWORD:-admin-secret}
BIND_DN=cn=gpupool,ou=services,$SUFFIX
BIND_PW=${LDAP_BIND_PASSWORD:-gpupool-secret}
PORT=${LDAP_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
URI=ldap://127.0.0.1:$PORT/
TIMEOUT=${LDAP_START_TIMEOUT:-30}

[[ -f $RUN/slapd.pid ]] && kill -0 "$(cat "$RUN/slapd.pid")" 2>/dev/null && die "slapd already runs in $RUN"
rm -rf "$RUN/slapd.d" "$RUN/data" "$RUN/tls"
mkdir -p "$RUN/slapd.d" "$RUN/data" "$RUN/tls"

# A self-signed certificate for 127.0.0.1 (its own CA: clients trust it through LDAP_CA_FILE).
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=127.0.0.1" \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
    -keyout "$RUN/tls/key.pem" -out "$RUN/tls/cert.pem" 2>/dev/null

cat >"$RUN/config.ldif" <<LDIF
dn: cn=config
objectClass: olcGlobal
cn: config
olcPidFile: $RUN/slapd.pid
olcTLSCACertificateFile: $RUN/tls/cert.pem
olcTLSCertificateFile: $RUN/tls/cert.pem
olcTLSCertificateKeyFile: $RUN/tls/key.pem

dn: cn=module{0},cn=config
objectClass: olcModuleList
cn: module{0}
olcModulePath: /usr/lib/ldap
olcModuleLoad: back_mdb
olcModuleLoad: ppolicy

dn: cn=schema,cn=config
objectClass: olcSchemaConfig
cn: schema

include: file:///etc/ldap/schema/core.ldif
include: file:///etc/ldap/schema/cosine.ldif
include: file:///etc/ldap/schema/nis.ldif
include: file:///etc/ldap/schema/inetorgperson.ldif

dn: olcDatabase={-1}frontend,cn=config
objectClass: olcDatabaseConfig
objectClass: olcFrontendConfig
olcDatabase: {-1}frontend

dn: olcDatabase={0}config,cn=config
objectClass: olcDatabaseConfig
olcDatabase: {0}config
olcAccess: {0}to * by * none

dn: olcDatabase={1}mdb,cn=config
objectClass: olcDatabaseConfig
objectClass: olcMdbConfig
olcDatabase: {1}mdb
olcDbDirectory: $RUN/data
olcDbMaxSize: 2147483648
olcSuffix: $SUFFIX
olcRootDN: $ADMIN_DN
olcRootPW: $(slappasswd -s "$ADMIN_PW")
olcDbIndex: objectClass eq
olcDbIndex: uid eq
olcDbIndex: member eq
olcSizeLimit: size.soft=500 size.hard=500 size.prtotal=unlimited
olcAccess: {0}to attrs=userPassword by self =xw by anonymous auth by * none
olcAccess: {1}to * by dn.exact="$BIND_DN" read by self read by * none

dn: olcOverlay={0}ppolicy,olcDatabase={1}mdb,cn=config
objectClass: olcOverlayConfig
objectClass: olcPPolicyConfig
olcOverlay: {0}ppolicy
olcPPolicyDefault: cn=default,ou=policies,$SUFFIX
LDIF

cat >"$RUN/base.ldif" <<LDIF
dn: $SUFFIX
objectClass: dcObject
objectClass: organization
dc: centre
o: Example AI compute centre

dn: ou=people,$SUFFIX
objectClass: organizationalUnit
ou: people

dn: ou=groups,$SUFFIX
objectClass: organizationalUnit
ou: groups

dn: ou=services,$SUFFIX
objectClass: organizationalUnit
ou: services

dn: $BIND_DN
objectClass: organizationalRole
objectClass: simpleSecurityObject
cn: gpupool
userPassword: $(slappasswd -s "$BIND_PW")

dn: ou=policies,$SUFFIX
objectClass: organizationalUnit
ou: policies

dn: cn=default,ou=policies,$SUFFIX
objectClass: organizationalRole
objectClass: pwdPolicy
cn: default
pwdAttribute: userPassword
pwdLockout: TRUE
LDIF

slapadd -q -n 0 -F "$RUN/slapd.d" -l "$RUN/config.ldif"
slapadd -q -n 1 -F "$RUN/slapd.d" -l "$RUN/base.ldif"
if [[ -n $EXTRA ]]; then
    slapadd -q -n 1 -F "$RUN/slapd.d" -l "$EXTRA"
fi

slapd -F "$RUN/slapd.d" -h "$URI" 2>"$RUN/slapd.log" || die "slapd did not start: $(cat "$RUN/slapd.log")"
for ((i = 0; i < TIMEOUT * 5; i++)); do
    if ldapsearch -x -LLL -H "$URI" -D "$BIND_DN" -w "$BIND_PW" -b "$SUFFIX" -s base dn >/dev/null 2>&1; then
        break
    fi
    sleep 0.2
done
((i < TIMEOUT * 5)) || die "slapd did not answer on $URI within ${TIMEOUT}s"

cat >"$RUN/ldap.env" <<ENV
LDAP_URI=$URI
LDAP_PORT=$PORT
LDAP_SUFFIX=$SUFFIX
LDAP_ADMIN_DN=$ADMIN_DN
LDAP_ADMIN_PASSWORD=$ADMIN_PW
LDAP_BIND_DN=$BIND_DN
LDAP_BIND_PASSWORD=$BIND_PW
LDAP_CA_FILE=$RUN/tls/cert.pem
ENV
echo "slapd on $URI (run dir $RUN)" >&2
cat "$RUN/ldap.env"
