#!/usr/bin/env bash
# Validates what an operator applies: the rendered install
# (`kubectl kustomize manifests/`), the install with each optional component
# under manifests/components/, and the examples in examples/manifests/,
# against the Kubernetes OpenAPI schema (strict: unknown fields are errors)
# with kubernetes-validate, which it installs into a private virtualenv on
# first use.
#
# Documents of kinds the schema does not know (instances of custom
# resources, e.g. cert-manager's, or the monitoring component's
# ServiceMonitor and PrometheusRule) are reported as WARN and skipped; their
# shape is checked by tests/it/monitoring.rs (and the PromQL they hold
# against a real scrape). CustomResourceDefinitions themselves are validated.
#
#   K8S_VERSION                  Kubernetes version to validate against (1.37)
#   KUBERNETES_VALIDATE_VERSION  kubernetes-validate release to install (1.37.0)
#   KRS_TOOLS_DIR                where the virtualenv lives (~/.cache/kruntimes-scheduler)
#   KUBECTL                      kubectl to render with (kubectl)
set -euo pipefail
cd "$(dirname "$0")/.."

k8s_version="${K8S_VERSION:-1.37}"
kv_version="${KUBERNETES_VALIDATE_VERSION:-1.37.0}"
tools="${KRS_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kruntimes-scheduler}"
venv="$tools/kubernetes-validate-$kv_version"
kubectl="${KUBECTL:-kubectl}"

if ! "$kubectl" kustomize --help >/dev/null 2>&1; then
    echo "error: '$kubectl kustomize' is needed to render manifests/ (install kubectl)" >&2
    exit 1
fi

if [ ! -x "$venv/bin/kubernetes-validate" ]; then
    echo "installing kubernetes-validate $kv_version into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$kv_version"
fi

# kustomize takes only relative paths to other kustomizations: overlays
# are written below target/, two levels under the repository root.
mkdir -p target
out="$(mktemp -d -p target manifest-render.XXXXXX)"
trap 'rm -rf "$out"' EXIT

# The default install.
"$kubectl" kustomize manifests/ > "$out/install.yaml"
files=("$out/install.yaml")

# The install with each optional component.
for c in manifests/components/*/; do
    name="$(basename "$c")"
    mkdir -p "$out/with-$name"
    cat > "$out/with-$name/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../../../manifests
components:
- ../../../${c%/}
YAML
    "$kubectl" kustomize "$out/with-$name" > "$out/with-$name.yaml"
    files+=("$out/with-$name.yaml")
done

# Examples outside the install.
while IFS= read -r -d '' f; do
    files+=("$f")
done < <(find examples/manifests -type f \( -name '*.yaml' -o -name '*.yml' \) -print0 | sort -z)

# kubernetes-validate exits non-zero on any ERROR; WARN (unknown kind) passes.
"$venv/bin/kubernetes-validate" --strict --quiet -k "$k8s_version" "${files[@]}"
echo "validated ${#files[@]} rendered or example manifest files against Kubernetes $k8s_version" >&2
