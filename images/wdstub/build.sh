#!/usr/bin/env bash
# Builds the stub WebDriver image: a FROM scratch image around the static wdstub
# binary, listening on 4444. Tagged by the binary's hash, so an unchanged stub is
# not rebuilt. Prints the tag on its last line.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dir/wdstub" ./cmd/wdstub
tag="websummoner/wdstub:$(sha256sum "$dir/wdstub" | cut -c1-12)"
if ! docker image inspect "$tag" >/dev/null 2>&1; then
  cat > "$dir/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY wdstub /wdstub
EXPOSE 4444
ENTRYPOINT ["/wdstub", "-all", "-port", "4444"]
DOCKERFILE
  docker build -q -t "$tag" "$dir" >&2
fi
echo "$tag"
