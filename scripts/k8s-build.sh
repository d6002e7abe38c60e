#!/usr/bin/env bash
# Builds the single-node test cluster's binaries from sources into
# ${WEBSUMMONER_K8S_CACHE:-$HOME/.cache/websummoner/k8s}/<version>/bin, each only
# when missing or its sources here changed (a second run builds nothing):
#   k8s          the multi-call binary of deploy/kubernetes/cluster (etcd,
#                kube-apiserver, kube-controller-manager, kube-scheduler,
#                kubelet, kube-proxy, kubectl), plus one symlink per component
#   cri-dockerd  Mirantis cri-dockerd, the CRI for Docker Engine, with two
#                patches (docs/kubernetes-cluster.md)
# and the pause image (images/pause). Usage: scripts/k8s-build.sh [k8s|cri-dockerd|pause]...
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

K8S_VERSION=v1.37.2
K8S_MAJOR=1
K8S_MINOR=37
CRI_DOCKERD_VERSION=v0.3.17
PAUSE_IMAGE=${WEBSUMMONER_K8S_PAUSE_IMAGE:-websummoner/pause:3.10}
cache=${WEBSUMMONER_K8S_CACHE:-$HOME/.cache/websummoner/k8s}/$K8S_VERSION
bin=$cache/bin
mkdir -p "$bin"

GO=${GO:-go}
# The Go toolchain installed here; a module asking for a newer one must fail
# instead of fetching one.
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

log() { echo "k8s-build: $*" >&2; }

# A binary is rebuilt when what it is built from changed: each has a stamp,
# the hash of its sources in this repository (and of its build function).
stamp() { cat "$@" | sha256sum | cut -c1-16; }
k8s_stamp() {
  { declare -f build_k8s; cat deploy/kubernetes/cluster/go.mod deploy/kubernetes/cluster/go.sum deploy/kubernetes/cluster/cmd/k8s/*.go; } | stamp
}
cri_dockerd_stamp() {
  { declare -f build_cri_dockerd; cat deploy/kubernetes/cluster/cri-dockerd/go.mod deploy/kubernetes/cluster/cri-dockerd/go.sum deploy/kubernetes/cluster/cri-dockerd/libdocker/*.go; } | stamp
}
fresh() { [ -x "$bin/$1" ] && [ "$(cat "$bin/.$1.stamp" 2>/dev/null)" = "$2" ]; }

build_k8s() {
  local want; want=$(k8s_stamp)
  fresh k8s "$want" && return 0
  log "building k8s $K8S_VERSION (the multi-call binary; long the first time: docs/kubernetes-cluster.md)"
  local pkg=k8s.io/component-base/version cgo=k8s.io/client-go/pkg/version
  local date; date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local x="-X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$K8S_MAJOR -X $pkg.gitMinor=$K8S_MINOR -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  x="$x -X $cgo.gitVersion=$K8S_VERSION -X $cgo.gitMajor=$K8S_MAJOR -X $cgo.gitMinor=$K8S_MINOR -X $cgo.gitTreeState=clean -X $cgo.buildDate=$date"
  local start=$SECONDS
  (cd deploy/kubernetes/cluster &&
    CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w $x" -o "$bin/k8s.tmp" ./cmd/k8s)
  mv "$bin/k8s.tmp" "$bin/k8s"
  echo "$want" > "$bin/.k8s.stamp"
  log "k8s built in $((SECONDS - start))s"
}

link_components() {
  local c
  for c in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    [ -L "$bin/$c" ] || ln -sfn k8s "$bin/$c"
  done
}

build_cri_dockerd() {
  local want; want=$(cri_dockerd_stamp)
  fresh cri-dockerd "$want" && return 0
  log "building cri-dockerd $CRI_DOCKERD_VERSION"
  local start=$SECONDS wrap=deploy/kubernetes/cluster/cri-dockerd mod work
  # The wrapper module pins the version and its go.sum checks the download;
  # the build itself runs in a copy of cri-dockerd's module (its go.mod and
  # replaces, the modules already in the module cache), carrying one patch (see $wrap/libdocker/oom.go): a
  # negative oom_score_adj is raised to 0 where CAP_SYS_RESOURCE is missing.
  # (go build -overlay cannot replace files in the module cache.)
  mod=$(cd "$wrap" && "$GO" mod download -json github.com/Mirantis/cri-dockerd | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -f "$mod/go.mod" ] || { log "no cri-dockerd module source at '$mod'"; exit 1; }
  work=$cache/src/cri-dockerd
  rm -rf "$work"
  mkdir -p "$cache/src"
  cp -r "$mod" "$work"
  chmod -R u+w "$work"
  rm -rf "$work/vendor" # the module zip holds only vendor/modules.txt
  # patch FILE SED EXPECTED: applies SED to FILE, which must then hold the
  # line EXPECTED exactly once.
  patch_src() {
    sed -i "$2" "$work/$1"
    if [ "$(grep -cxF -- "$3" "$work/$1")" != 1 ]; then
      log "cri-dockerd's $1 changed: a patch of k8s-build.sh does not apply"
      exit 1
    fi
  }
  # 1. No negative oom_score_adj without CAP_SYS_RESOURCE ($wrap/libdocker/oom.go).
  patch_src libdocker/kube_docker_client.go \
    's/^\tcreateResp, err := d\.client\.ContainerCreate($/\tclampOOMScoreAdj(opts.HostConfig)\n&/' \
    $'\tclampOOMScoreAdj(opts.HostConfig)'
  # 2. Exec/attach/port-forward URLs with a scheme. cri-dockerd answers
  # "//127.0.0.1:port/cri/exec/..."; the kubelet's WebSocket-to-SPDY
  # translator (ExtendWebSocketsToKubelet, what kubectl exec uses since
  # v1.31) dials such a URL with TLS and fails ("server gave HTTP response to
  # HTTPS client"). The streaming server speaks plain HTTP, so say so.
  patch_src cmd/server.go \
    's|^\(\t*BaseURL: *\)&url.URL{Path: "/cri/"},$|\1\&url.URL{Scheme: "http", Path: "/cri/"},|' \
    $'\t\tBaseURL:                         &url.URL{Scheme: "http", Path: "/cri/"},'
  cp "$wrap/libdocker/oom.go" "$work/libdocker/zz_websummoner_oom.go"
  (cd "$work" &&
    CGO_ENABLED=0 "$GO" build -mod=mod -trimpath \
      -ldflags "-s -w -X github.com/Mirantis/cri-dockerd/cmd/version.Version=${CRI_DOCKERD_VERSION#v}" \
      -o "$bin/cri-dockerd.tmp" .)
  mv "$bin/cri-dockerd.tmp" "$bin/cri-dockerd"
  echo "$want" > "$bin/.cri-dockerd.stamp"
  log "cri-dockerd built in $((SECONDS - start))s"
}

build_pause() {
  docker image inspect "$PAUSE_IMAGE" >/dev/null 2>&1 && return 0
  log "building the pause image $PAUSE_IMAGE"
  images/pause/build.sh "$PAUSE_IMAGE"
}

what=("$@")
[ ${#what[@]} -gt 0 ] || what=(k8s cri-dockerd pause)
for w in "${what[@]}"; do
  case $w in
    k8s) build_k8s; link_components ;;
    cri-dockerd) build_cri_dockerd ;;
    pause) build_pause ;;
    *) log "unknown target $w"; exit 2 ;;
  esac
done
