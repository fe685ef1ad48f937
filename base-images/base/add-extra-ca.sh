#!/bin/sh
# Trusts the PEM certificate(s) in $EXTRA_CA_CERT (the build argument), if any: for users whose TLS
# goes through a corporate proxy, so that images built FROM this one can download online.
set -eu
[ -n "${EXTRA_CA_CERT:-}" ] || exit 0
printf '%s\n' "$EXTRA_CA_CERT" >/usr/local/share/ca-certificates/veri-extra-ca.crt
update-ca-certificates >/dev/null
echo "trusted the extra CA certificate(s) from EXTRA_CA_CERT"
