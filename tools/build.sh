#!/usr/bin/env bash
# Builds the real binaries pko's tests run (kube-apiserver, etcd, kube-controller-manager, kubectl; kubelet,
# kube-proxy, kube-scheduler, containerd, crictl and CoreDNS for the single-node cluster; the Pulumi CLI and its language
# hosts; Flux source-controller; Helm; the dashboard and rule checkers; a Prometheus server; gofakes3, an
# S3-compatible object store; an OCI registry; krew; the Kubernetes provider plugin and local-path-provisioner)
# from the Go module proxy, into a cache outside the repository.
# Sources the proxy does not serve are built from the shared directory beside the repository (../shared/third_party,
# or $PKO_SHARED_DIR): the official Python, Node.js and Go language hosts, the random provider plugin (also packed as
# a release tarball for the test bed's plugin mirror) and the Go reference operator.
#
# Each group lands in "$PKO_BIN_DIR/<group>-<version>/" and is built only when that directory is missing,
# so a warm machine skips the Go builds. The top of "$PKO_BIN_DIR" holds symlinks to the current versions:
# put it on PATH. The last line printed is that directory.
#
# Usage: tools/build.sh [GROUP...]   builds every group, or only the named ones (e.g. `pulumi-language-python`).
#        tools/build.sh --for demo   only what `make demo` runs (the local control plane, the CLI, the YAML host)
#        tools/build.sh --for demo-cluster   what `make demo-cluster` runs (adds the node, Helm, the Python host)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
BIN_DIR=${PKO_BIN_DIR:-$HOME/.cache/pko/bin}
K8S_VERSION=v1.34.10
ETCD_VERSION=v3.6.4
PULUMI_VERSION=v3.259.0
PULUMI_YAML_VERSION=v1.25.0
SOURCE_CONTROLLER_VERSION=v1.9.1
HELM_VERSION=v3.22.0
CRICTL_VERSION=v1.34.0
# The node's container runtime (with its runc shim and ctr; runc itself is Debian's): containerd 2, for `image` volumes
# (Debian 12's containerd 1.6 has none)
CONTAINERD_VERSION=v2.2.9
COREDNS_VERSION=v1.13.1
# The Go module of Prometheus 3: its promtool checks and unit-tests the alert rules; its server scrapes the cluster
# tier's workload pods (pko.testing.prometheus)
PROMETHEUS_VERSION=v0.316.0
GRAFANA_SDK_VERSION=v0.0.22  # github.com/grafana/grafana-foundation-sdk/go, pinned in tools/grafana-dashboard/go.mod
# The Go reference operator in ../shared/third_party/pulumi-kubernetes-operator (see its README): v2.9.0 at
# upstream commit 475dbc6c. Its binaries report v2.9.0.
PKO_GO_VERSION=v2.9.0
PKO_GO_COMMIT=475dbc6c
# The random provider in ../shared/third_party/pulumi-random (see its README): the plugin real programs download
# from the test bed's plugin mirror (docs/air-gapped.md).
RANDOM_VERSION=v4.19.1
GOFAKES3_VERSION=v1.2.0      # the S3-compatible object store the state-store scenarios keep Pulumi state in
# go-containerregistry's in-memory OCI registry, behind tools/oci-registry/main.go (one listen address): where the
# Flux OCIRepository tests push their artifacts
GGCR_VERSION=v0.21.6
KREW_VERSION=v0.4.3  # krew and its manifest validator: the tests install kubectl pko's archive as krew users do
# The Kubernetes provider plugin real TypeScript programs download from the plugin mirror: the module the proxy serves
# (tools/pulumi-kubernetes/go.mod, a 2026-01-15 pseudo-version), stamped as the @pulumi/kubernetes release it pairs with
KUBERNETES_PROVIDER_VERSION=v4.24.1
LOCAL_PATH_PROVISIONER_VERSION=v0.0.30  # the test cluster's default StorageClass provisions with it, as kind's does

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false"
# The checksum database behind our module proxy does not know every module version we pin; the committed
# go.sum files in tools/*/ are what verifies the downloads.
export GONOSUMDB=${GONOSUMDB:-github.com/pulumi,sigs.k8s.io/cri-tools}

log() { printf '[tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Named sets of groups: a quick start builds only what it runs.
profile=all
if [ "${1:-}" = "--for" ]; then
  profile=${2:?"--for needs demo or demo-cluster"}
  shift 2
  case $profile in
    demo) set -- kubernetes etcd pulumi pulumi-yaml ;;
    demo-cluster) set -- kubernetes kube-controller-manager kube-node crictl containerd coredns etcd pulumi pulumi-language-python pulumi-yaml helm ;;
    *) log "unknown set '$profile' (demo, demo-cluster)"; exit 1 ;;
  esac
fi

# The Debian packages the test bed needs come first: a missing one stops here (or, as root, gets installed).
bash "$here/debian-packages.sh" "$profile"
command -v go >/dev/null || { log "go is not on PATH: install Go >= 1.25 first"; exit 1; }
mkdir -p "$BIN_DIR"

# group NAME VERSION BUILD_FUNCTION: build into a .partial directory, then rename, so a killed build never
# looks complete.
only=("$@")
group() {
  local name=$1 version=$2 fn=$3 dest="$BIN_DIR/$1-$2"
  if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then return 0; fi
  if [ -f "$dest/.complete" ]; then
    log "$name $version: cached in $dest"
  else
    log "$name $version: building (this takes a while on a cold machine)"
    local start=$SECONDS
    rm -rf "$dest.partial" && mkdir -p "$dest.partial"
    "$fn" "$dest.partial" "$version"
    touch "$dest.partial/.complete"
    rm -rf "$dest" && mv "$dest.partial" "$dest"
    log "$name $version: built in $((SECONDS - start))s"
  fi
  local f
  for f in "$dest"/*; do ln -sfn "$f" "$BIN_DIR/$(basename "$f")"; done
}

# Scratch directories (writable copies of read-only sources), removed however the script ends.
scratch=()
trap 'if [ ${#scratch[@]} -gt 0 ]; then chmod -R u+w "${scratch[@]}" 2>/dev/null; rm -rf "${scratch[@]}"; fi' EXIT

# copy_shared NAME: sets $copied to a writable temporary copy of ../shared/third_party/NAME (nothing is ever
# written into ../shared; Go writes go.sum and the copies must be writable anyway).
copy_shared() {
  local shared=${PKO_SHARED_DIR:-$repo/../shared}
  if [ ! -d "$shared/third_party/$1" ]; then
    log "ERROR: $shared/third_party/$1 is missing. It holds sources the module proxy does not serve; check out the"
    log "shared directory beside the repository (../shared) or set PKO_SHARED_DIR to it."
    exit 1
  fi
  copied=$(mktemp -d "${TMPDIR:-/tmp}/pko-tools-$1.XXXXXX")
  scratch+=("$copied")
  cp -R "$shared/third_party/$1/." "$copied/"
  chmod -R u+w "$copied"
}

gobuild() {  # gobuild MODULE_DIR OUT PKG LDFLAGS [TAGS]
  local mod=$1 out=$2 pkg=$3 ld=$4 tags=${5:-}
  log "  go build $(basename "$out")"
  (cd "$mod" && go build -trimpath ${tags:+-tags "$tags"} -ldflags "$ld" -o "$out" "$pkg")
}

k8s_ldflags() {  # k8s_ldflags VERSION: the version stamps a release build sets (`--version`, `/version`)
  local v=$1 minor ld p
  minor=${v#v1.}; minor=${minor%%.*}
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ld="$ld -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.buildDate=2026-01-01T00:00:00Z"
  done
  echo "$ld"
}

build_kubernetes() {
  local out=$1 v=$2 p
  for p in kube-apiserver kubectl; do
    gobuild "$here/k8s" "$out/$p" "k8s.io/kubernetes/cmd/$p" "$(k8s_ldflags "$v")"
  done
}

build_kube_controller_manager() {
  # A group of its own: `make demo` runs no controller manager (garbage collection matters only to tests).
  gobuild "$here/k8s" "$1/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager \
    "$(k8s_ldflags "$2")"
}

build_kube_node() {
  # The node side of the single-node cluster, from the same module graph as the control plane.
  local out=$1 v=$2 p
  for p in kubelet kube-proxy kube-scheduler; do
    gobuild "$here/k8s" "$out/$p" "k8s.io/kubernetes/cmd/$p" "$(k8s_ldflags "$v")"
  done
}

build_crictl() {
  gobuild "$here/crictl" "$1/crictl" sigs.k8s.io/cri-tools/cmd/crictl \
    "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$2"
}

build_containerd() {
  # Static (CGO off), without the snapshotters that need cgo or host tools; the node uses overlayfs.
  local out=$1 v=$2 p
  for p in containerd containerd-shim-runc-v2 ctr; do
    gobuild "$here/containerd" "$out/$p" "github.com/containerd/containerd/v2/cmd/$p" \
      "-s -w -X github.com/containerd/containerd/v2/version.Version=$v" "no_btrfs no_zfs no_devmapper"
  done
}

build_coredns() {
  gobuild "$here/coredns" "$1/coredns" github.com/coredns/coredns "-s -w"
}

build_etcd() {
  gobuild "$here/k8s" "$1/etcd" go.etcd.io/etcd/server/v3 "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$2"
}

build_pulumi() {
  local out=$1 v=$2 sdk
  gobuild "$here/pulumi" "$out/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi \
    "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$v" osusergo,grpcnotrace
  # The dynamic-provider plugin is a shell script shipped in the sdk module.
  sdk=$(cd "$here/pulumi" && go list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3)
  cp "$sdk/python/dist/pulumi-resource-pulumi-python" "$out/"
  chmod 755 "$out/pulumi-resource-pulumi-python"
}

build_python_host() {
  # The official Python language host (github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3): the
  # proxy refuses that module, so it is built from its source in ../shared. It runs programs through the SDK's
  # `pulumi-language-python-exec`, which must sit next to it (it ships in the sdk/v3 module).
  local sdk
  build_language_host "$1" "$2" python
  sdk=$(cd "$copied" && go list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3)
  install -m 755 "$sdk/python/cmd/pulumi-language-python-exec" "$1/pulumi-language-python-exec"
}

build_language_host() {  # build_language_host OUT VERSION LANG: an official language host, from ../shared
  local out=$1 v=$2 lang=$3 src sdk_version
  copy_shared "pulumi-language-$lang"
  src=$copied
  sdk_version=$(cd "$src" && go list -m -f '{{.Version}}' github.com/pulumi/pulumi/sdk/v3)
  if [ "$sdk_version" != "$v" ]; then
    log "ERROR: the $lang language host in ../shared pins the Pulumi SDK $sdk_version, not $v"
    exit 1
  fi
  gobuild "$src" "$out/pulumi-language-$lang" . \
    "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$v" osusergo,grpcnotrace
}
build_nodejs_host() { build_language_host "$1" "$2" nodejs; }
build_go_host() { build_language_host "$1" "$2" go; }

build_pulumi_random() {
  # The random provider plugin, and the same binary packed as Pulumi's release servers publish a plugin
  # (pulumi-resource-<name>-v<version>-<os>-<arch>.tar.gz with the binary at its root): what the plugin mirror serves.
  local out=$1 v=$2 src
  copy_shared pulumi-random
  src=$copied/provider
  (cd "$src" && VERSION=${v#v} go generate ./cmd/pulumi-resource-random)
  gobuild "$src" "$out/pulumi-resource-random" ./cmd/pulumi-resource-random \
    "-s -w -X github.com/pulumi/pulumi-random/provider/v4/pkg/version.Version=${v#v}"
  tar -C "$out" --owner=0 --group=0 --numeric-owner --mtime=@0 -czf \
    "$out/pulumi-resource-random-$v-linux-amd64.tar.gz" pulumi-resource-random
}

build_pulumi_kubernetes() {
  # The proxy's module lacks the generated schema the plugin embeds: build from a writable copy of it, the schema
  # generated there (as the provider's release does), the in-repository replace of its SDK dropped (the SDK comes from
  # the proxy at the version its go.mod names); then packed as the plugin mirror serves it.
  local out=$1 v=$2 mod src
  mod=$(cd "$here/pulumi-kubernetes" && go list -m -f '{{.Dir}}' github.com/pulumi/pulumi-kubernetes/provider/v4)
  if [ -z "$mod" ] || [ ! -d "$mod" ]; then
    (cd "$here/pulumi-kubernetes" && go mod download github.com/pulumi/pulumi-kubernetes/provider/v4)
    mod=$(cd "$here/pulumi-kubernetes" && go list -m -f '{{.Dir}}' github.com/pulumi/pulumi-kubernetes/provider/v4)
  fi
  src=$(mktemp -d "${TMPDIR:-/tmp}/pko-tools-pulumi-kubernetes.XXXXXX")
  scratch+=("$src")
  cp -R "$mod/." "$src/"
  chmod -R u+w "$src"
  (cd "$src" && go mod edit -dropreplace=github.com/pulumi/pulumi-kubernetes/sdk/v4)
  (cd "$src/cmd/pulumi-resource-kubernetes" && VERSION=${v#v} go run generate.go)
  gobuild "$src" "$out/pulumi-resource-kubernetes" ./cmd/pulumi-resource-kubernetes \
    "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=${v#v}"
  tar -C "$out" --owner=0 --group=0 --numeric-owner --mtime=@0 -czf \
    "$out/pulumi-resource-kubernetes-$v-linux-amd64.tar.gz" pulumi-resource-kubernetes
}

build_local_path_provisioner() {
  gobuild "$here/local-path-provisioner" "$1/local-path-provisioner" github.com/rancher/local-path-provisioner \
    "-s -w"
}

build_gofakes3() {
  gobuild "$here/gofakes3" "$1/gofakes3" github.com/johannesboyne/gofakes3/cmd/gofakes3 "-s -w"
}

build_oci_registry() {
  gobuild "$here/oci-registry" "$1/oci-registry" . "-s -w"
}

build_pko_go() {
  # The Go reference operator (github.com/pulumi/pulumi-kubernetes-operator/v2): its manager and its agent, for
  # the cross-runs and the side-by-side benchmarks. The proxy refuses the module, so it is built from ../shared.
  local out=$1 v=${2%-*} src m
  copy_shared pulumi-kubernetes-operator
  src=$copied
  if ! grep -q "at commit $PKO_GO_COMMIT" "$src/README.md"; then
    log "ERROR: the Go operator in ../shared is not upstream commit $PKO_GO_COMMIT (see its README.md);"
    log "update PKO_GO_VERSION and PKO_GO_COMMIT in tools/build.sh"
    exit 1
  fi
  m=github.com/pulumi/pulumi-kubernetes-operator/v2
  gobuild "$src" "$out/pko-go-manager" ./operator/cmd "-s -w -X $m/operator/version.Version=$v"
  gobuild "$src" "$out/pko-go-agent" ./agent "-s -w -X $m/agent/version.Version=$v"
}

build_pulumi_yaml() {
  gobuild "$here/pulumi-yaml" "$1/pulumi-language-yaml" github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml \
    "-s -w -X github.com/pulumi/pulumi-yaml/pkg/version.Version=$2"
}

build_source_controller() {
  local out=$1 mod
  gobuild "$here/source-controller" "$out/source-controller" github.com/fluxcd/source-controller "-s -w"
  # The Flux CRDs ship in the module; the tests apply them by hand (pko.testing.flux reads $PKO_BIN_DIR/flux-crds).
  mod=$(cd "$here/source-controller" && go list -m -f '{{.Dir}}' github.com/fluxcd/source-controller)
  mkdir -p "$out/flux-crds"
  cp "$mod"/config/crd/bases/*.yaml "$out/flux-crds/"
  chmod -R u+w "$out/flux-crds"
}

build_helm() {
  # helm lints and renders deploy/helm/pko in tests and generates deploy/quickstart/install.yaml; its default
  # Kubernetes version (for lint and `.Capabilities`) is the one the tests run.
  local out=$1 v=$2 minor ld p
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  ld="-s -w -X helm.sh/helm/v3/internal/version.version=$v -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ld="$ld -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$minor"
  done
  gobuild "$here/helm" "$out/helm" helm.sh/helm/v3/cmd/helm "$ld"
}

build_promtool() {
  gobuild "$here/promtool" "$1/promtool" github.com/prometheus/prometheus/cmd/promtool \
    "-s -w -X github.com/prometheus/common/version.Version=$2"
}

build_prometheus() {
  # The Prometheus server, from the same module graph as promtool (tools/promtool/go.mod lists both as tools).
  gobuild "$here/promtool" "$1/prometheus" github.com/prometheus/prometheus/cmd/prometheus \
    "-s -w -X github.com/prometheus/common/version.Version=$2"
}

build_krew() {
  # Unstamped (a development build in krew's eyes): it then never runs its upgrade check against GitHub.
  gobuild "$here/krew" "$1/krew" sigs.k8s.io/krew/cmd/krew "-s -w"
  gobuild "$here/krew" "$1/validate-krew-manifest" sigs.k8s.io/krew/cmd/validate-krew-manifest "-s -w"
}

build_grafana_dashboard_check() {
  # The schema check of deploy/grafana/pko.json: tools/grafana-dashboard/main.go over the Grafana Foundation SDK's
  # typed dashboard model (keyed by the SDK version and the checker's source hash).
  gobuild "$here/grafana-dashboard" "$1/grafana-dashboard-check" . "-s -w"
}

# prefetch NAME VERSION MODULE_DIR PACKAGE: when group NAME is to be built, load its package in the background
# (which downloads the modules it needs) while the groups before it compile. On an empty module cache (a new
# machine's `make demo`) the Pulumi CLI's downloads then wait on the network while Kubernetes keeps the CPU busy,
# instead of after it. Loading only reads: the build itself still says what failed.
prefetching=()
prefetch() {
  local name=$1 version=$2 dir=$3 pkg=$4
  if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then return 0; fi
  [ -f "$BIN_DIR/$name-$version/.complete" ] && return 0
  (cd "$here/$dir" && go list -deps "$pkg" >/dev/null 2>&1 || true) &
  prefetching+=($!)
}
prefetch pulumi "$PULUMI_VERSION" pulumi github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
prefetch pulumi-yaml "$PULUMI_YAML_VERSION" pulumi-yaml github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml

group kubernetes "$K8S_VERSION" build_kubernetes
group kube-controller-manager "$K8S_VERSION" build_kube_controller_manager
group kube-node "$K8S_VERSION" build_kube_node
group crictl "$CRICTL_VERSION" build_crictl
group containerd "$CONTAINERD_VERSION" build_containerd
group coredns "$COREDNS_VERSION" build_coredns
group etcd "$ETCD_VERSION" build_etcd
group pulumi "$PULUMI_VERSION" build_pulumi
# pko once shipped its own Python host as the group python-host-<version>; the official host replaced it (the
# group below also re-points the top-level symlinks).
rm -rf "$BIN_DIR"/python-host-*
group pulumi-language-python "$PULUMI_VERSION" build_python_host
group pulumi-yaml "$PULUMI_YAML_VERSION" build_pulumi_yaml
group pulumi-language-nodejs "$PULUMI_VERSION" build_nodejs_host
group pulumi-language-go "$PULUMI_VERSION" build_go_host
group pulumi-random "$RANDOM_VERSION" build_pulumi_random
group gofakes3 "$GOFAKES3_VERSION" build_gofakes3
group oci-registry "$GGCR_VERSION-$(cat "$here"/oci-registry/{go.mod,go.sum,main.go} | sha256sum | cut -c1-12)" \
  build_oci_registry
group source-controller "$SOURCE_CONTROLLER_VERSION" build_source_controller
group helm "$HELM_VERSION" build_helm
group pko-go "$PKO_GO_VERSION-$PKO_GO_COMMIT" build_pko_go
group promtool "$PROMETHEUS_VERSION" build_promtool
group prometheus "$PROMETHEUS_VERSION" build_prometheus
group krew "$KREW_VERSION" build_krew
group pulumi-kubernetes "$KUBERNETES_PROVIDER_VERSION" build_pulumi_kubernetes
group local-path-provisioner "$LOCAL_PATH_PROVISIONER_VERSION" build_local_path_provisioner
group grafana-dashboard-check "$GRAFANA_SDK_VERSION-$(cat "$here"/grafana-dashboard/{go.mod,go.sum,main.go} | sha256sum | cut -c1-12)" \
  build_grafana_dashboard_check

[ ${#prefetching[@]} -eq 0 ] || wait "${prefetching[@]}"
[ ${#only[@]} -eq 0 ] || { echo "$BIN_DIR"; exit 0; }
for b in kube-apiserver kube-controller-manager kubectl etcd kubelet kube-proxy kube-scheduler crictl coredns \
  containerd containerd-shim-runc-v2 ctr \
  pulumi pulumi-language-python pulumi-language-python-exec pulumi-language-yaml pulumi-language-nodejs \
  pulumi-language-go pulumi-resource-random gofakes3 oci-registry source-controller helm \
  pko-go-manager pko-go-agent promtool prometheus grafana-dashboard-check krew validate-krew-manifest \
  pulumi-resource-kubernetes local-path-provisioner; do
  [ -x "$BIN_DIR/$b" ] || { log "missing $BIN_DIR/$b after the build"; exit 1; }
done
log "kube-apiserver: $("$BIN_DIR/kube-apiserver" --version)"
log "etcd: $("$BIN_DIR/etcd" --version | head -1)"
log "kubelet: $("$BIN_DIR/kubelet" --version)"
log "containerd: $("$BIN_DIR/containerd" --version)"
log "pulumi: $("$BIN_DIR/pulumi" version)"
echo "$BIN_DIR"
