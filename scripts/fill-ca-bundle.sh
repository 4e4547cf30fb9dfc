#!/usr/bin/env bash
# Prints a webhook manifest with every `caBundle` filled with the CA written
# by `kruntimes-scheduler certs`.
#
#   scripts/fill-ca-bundle.sh CERTS_DIR|CA_FILE [MANIFEST] | kubectl apply -f -
#
# CERTS_DIR is the `--out` directory of `certs` (its ca.crt is used);
# MANIFEST defaults to examples/manifests/webhooks.yaml. The manifest on disk is not
# changed.
set -euo pipefail

usage() {
    echo "usage: $0 CERTS_DIR|CA_FILE [MANIFEST]" >&2
    exit 2
}

[ $# -ge 1 ] && [ $# -le 2 ] || usage
ca="$1"
[ -d "$ca" ] && ca="$ca/ca.crt"
manifest="${2:-$(dirname "$0")/../examples/manifests/webhooks.yaml}"

[ -r "$ca" ] || { echo "error: cannot read CA certificate $ca" >&2; exit 1; }
[ -r "$manifest" ] || { echo "error: cannot read manifest $manifest" >&2; exit 1; }
grep -q -- '-----BEGIN CERTIFICATE-----' "$ca" || { echo "error: $ca holds no PEM certificate" >&2; exit 1; }
grep -q 'caBundle:' "$manifest" || { echo "error: $manifest has no caBundle field" >&2; exit 1; }

bundle="$(base64 < "$ca" | tr -d '\n')"
# Replace the value (and the placeholder comment) of every caBundle line,
# keeping its indentation.
sed -E "s|^([[:space:]]*caBundle:).*$|\1 ${bundle}|" "$manifest"
