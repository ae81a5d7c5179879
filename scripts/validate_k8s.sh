#!/usr/bin/env bash
# Validates deploy/kubernetes: renders each kustomization (the CPU one and overlays/gpu) with `kubectl kustomize`
# and checks every resource against the Kubernetes OpenAPI schemas with kubernetes-validate (PyPI; schemas ship in
# the package, no cluster needed), strictly: an unknown or misplaced field fails. It first checks that a broken
# manifest is rejected, so a validator that passes everything fails this script.
#
# Installs what is missing: kubernetes-validate from PyPI, and kubectl from Debian (kubernetes-client, 1.20, whose
# old kustomize is why the kustomizations use `bases` and `patchesJson6902`). K8S_VERSION picks the schemas.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${K8S_VERSION:-1.31.0}

if ! command -v kubernetes-validate >/dev/null 2>&1; then
  python3 -m pip install -q --disable-pip-version-check kubernetes-validate
fi
if ! command -v kubectl >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq kubernetes-client
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The validator must reject a Deployment whose container has an unknown field.
cat > "$tmp/broken.yaml" <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: broken}
spec:
  selector: {matchLabels: {app: broken}}
  template:
    metadata: {labels: {app: broken}}
    spec:
      containers: [{name: c, image: x, replicaCount: 2}]
YAML
if kubernetes-validate --strict --quiet -k "$version" "$tmp/broken.yaml" >/dev/null 2>&1; then
  echo "validate_k8s: kubernetes-validate accepted a broken manifest; it checks nothing" >&2
  exit 1
fi

for dir in deploy/kubernetes deploy/kubernetes/overlays/gpu; do
  out="$tmp/$(echo "$dir" | tr / _).yaml"
  kubectl kustomize "$dir" > "$out" 2> "$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
  kubernetes-validate --strict --quiet -k "$version" "$out"
  echo "validate_k8s: $dir: $(grep -c '^kind:' "$out") resources valid against Kubernetes $version"
done
