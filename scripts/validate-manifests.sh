#!/usr/bin/env bash
# Validates every YAML document under manifests/ against the Kubernetes
# OpenAPI schema (strict: unknown fields are errors) with kubernetes-validate,
# which it installs into a private virtualenv on first use.
#
# Documents of kinds the schema does not know (instances of custom
# resources) are reported as WARN and skipped; CustomResourceDefinitions
# themselves are validated.
#
#   K8S_VERSION                  Kubernetes version to validate against (1.37)
#   KUBERNETES_VALIDATE_VERSION  kubernetes-validate release to install (1.37.0)
#   KRS_TOOLS_DIR                where the virtualenv lives (~/.cache/kruntimes-scheduler)
set -euo pipefail
cd "$(dirname "$0")/.."

k8s_version="${K8S_VERSION:-1.37}"
kv_version="${KUBERNETES_VALIDATE_VERSION:-1.37.0}"
tools="${KRS_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kruntimes-scheduler}"
venv="$tools/kubernetes-validate-$kv_version"

if [ ! -x "$venv/bin/kubernetes-validate" ]; then
    echo "installing kubernetes-validate $kv_version into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$kv_version"
fi

files=()
while IFS= read -r -d '' f; do
    files+=("$f")
done < <(find manifests -type f \( -name '*.yaml' -o -name '*.yml' \) -print0 | sort -z)
if [ "${#files[@]}" -eq 0 ]; then
    echo "no manifests found" >&2
    exit 1
fi

# kubernetes-validate exits non-zero on any ERROR; WARN (unknown kind) passes.
"$venv/bin/kubernetes-validate" --strict --quiet -k "$k8s_version" "${files[@]}"
echo "validated ${#files[@]} manifest files against Kubernetes $k8s_version" >&2
