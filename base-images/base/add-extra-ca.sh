#!/bin/sh
# Trusts the extra CA certificate(s) the build copied to /usr/local/share/ca-certificates/veri-extra-ca.pem
# (EXTRA_CA=file of make images / make base-image: one CA or a company's whole bundle; an empty file =
# none): for users whose TLS goes through a corporate proxy, so that images built FROM this one can
# download online. Optional argument: another PEM file.
set -eu
dir=/usr/local/share/ca-certificates
pem=${1:-$dir/veri-extra-ca.pem}
[ -s "$pem" ] || { rm -f "$dir/veri-extra-ca.pem"; exit 0; }
# One file per certificate: update-ca-certificates links each .crt by the hash of its first one only.
awk -v dir="$dir" '/-----BEGIN CERTIFICATE-----/ { n++; f = sprintf("%s/veri-extra-ca-%04d.crt", dir, n) }
  n { print > f } /-----END CERTIFICATE-----/ { close(f) }' "$pem"
rm -f "$dir/veri-extra-ca.pem"
count=$(ls "$dir" | grep -c '^veri-extra-ca-.*\.crt$' || true)
[ "$count" -gt 0 ] || { echo "veri-add-extra-ca: no -----BEGIN CERTIFICATE----- in $pem" >&2; exit 1; }
update-ca-certificates >/dev/null 2>&1
echo "trusted $count extra CA certificate(s)"
