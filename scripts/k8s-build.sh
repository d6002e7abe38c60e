#!/usr/bin/env bash
# Builds the single-node test cluster's binaries from sources into
# ${WEBSUMMONER_K8S_CACHE:-$HOME/.cache/websummoner/k8s}/<version>/bin, each only
# when missing (a second run builds nothing):
#   k8s          the multi-call binary of deploy/kubernetes/cluster (etcd,
#                kube-apiserver, kube-controller-manager, kube-scheduler,
#                kubelet, kube-proxy, kubectl), plus one symlink per component
#   cri-dockerd  Mirantis cri-dockerd, the CRI for Docker Engine
# and the pause image (images/pause). Usage: scripts/k8s-build.sh [k8s|cri-dockerd|pause]...
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

K8S_VERSION=v1.37.2
K8S_MAJOR=1
K8S_MINOR=37
CRI_DOCKERD_VERSION=v0.4.0
PAUSE_IMAGE=${WEBSUMMONER_K8S_PAUSE_IMAGE:-websummoner/pause:3.10}
cache=${WEBSUMMONER_K8S_CACHE:-$HOME/.cache/websummoner/k8s}/$K8S_VERSION
bin=$cache/bin
mkdir -p "$bin"

GO=${GO:-go}
# The Go toolchain installed here; a module asking for a newer one must fail
# instead of fetching one.
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

log() { echo "k8s-build: $*" >&2; }

build_k8s() {
  [ -x "$bin/k8s" ] && return 0
  log "building k8s $K8S_VERSION (the multi-call binary; a cold build takes the better part of an hour on 2 cores)"
  local pkg=k8s.io/component-base/version cgo=k8s.io/client-go/pkg/version
  local date; date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local x="-X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$K8S_MAJOR -X $pkg.gitMinor=$K8S_MINOR -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  x="$x -X $cgo.gitVersion=$K8S_VERSION -X $cgo.gitMajor=$K8S_MAJOR -X $cgo.gitMinor=$K8S_MINOR -X $cgo.gitTreeState=clean -X $cgo.buildDate=$date"
  local start=$SECONDS
  (cd deploy/kubernetes/cluster &&
    CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w $x" -o "$bin/k8s.tmp" ./cmd/k8s)
  mv "$bin/k8s.tmp" "$bin/k8s"
  log "k8s built in $((SECONDS - start))s"
}

link_components() {
  local c
  for c in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    [ -L "$bin/$c" ] || ln -sfn k8s "$bin/$c"
  done
}

build_cri_dockerd() {
  [ -x "$bin/cri-dockerd" ] && return 0
  log "building cri-dockerd $CRI_DOCKERD_VERSION"
  local start=$SECONDS
  (cd deploy/kubernetes/cluster/cri-dockerd &&
    CGO_ENABLED=0 "$GO" build -trimpath \
      -ldflags "-s -w -X github.com/Mirantis/cri-dockerd/cmd/version.Version=${CRI_DOCKERD_VERSION#v}" \
      -o "$bin/cri-dockerd.tmp" github.com/Mirantis/cri-dockerd)
  mv "$bin/cri-dockerd.tmp" "$bin/cri-dockerd"
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
