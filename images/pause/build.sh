#!/usr/bin/env bash
# Builds the test cluster's pod infrastructure image (cri-dockerd's
# --pod-infra-container-image): a FROM scratch image around the static pause
# binary of this directory. Cached by tag: an existing tag is not rebuilt
# (docker rmi it to rebuild). Prints the tag on its last line.
# Usage: images/pause/build.sh [tag]   (default websummoner/pause:3.10)
set -euo pipefail
cd "$(dirname "$0")"
tag=${1:-websummoner/pause:3.10}
if ! docker image inspect "$tag" >/dev/null 2>&1; then
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -ldflags "-s -w -X main.version=${tag##*:}" -o "$dir/pause" .
  cp Dockerfile "$dir/"
  docker build -q -t "$tag" "$dir" >&2
fi
echo "$tag"
