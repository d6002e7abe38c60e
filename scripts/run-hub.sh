#!/usr/bin/env bash
# Builds WebSummoner and runs it serving a real headless Chromium through a local
# chromedriver (config/browsers.local.json). Extra arguments are passed to the hub
# and override the defaults here, e.g. scripts/run-hub.sh -listen 127.0.0.1:5555 -limit 2
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
go build -ldflags "-X main.version=$(git describe --always --dirty 2>/dev/null || echo dev)" -o bin/websummoner ./cmd/websummoner
exec bin/websummoner -disable-docker -conf config/browsers.local.json -listen :4444 "$@"
