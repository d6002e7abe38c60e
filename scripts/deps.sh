#!/usr/bin/env bash
# Installs what WebSummoner's hub needs on a fresh Debian machine of this kind:
# Chromium and its driver, WebKit's (MiniBrowser on Xvfb), Python Selenium (the end-to-end tests' client and the
# README's example), and the Go modules; with "test", also what only the tests
# use (ffmpeg, Prometheus, Alertmanager, valgrind, gcc, Ruby's Selenium). Safe to run again: it installs only
# what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
# Each local driver runs in a sandbox of its own under -htpasswd (-process-sandbox).
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
/usr/bin/python3 -c 'import selenium' >/dev/null 2>&1 || need+=(python3-selenium)
# WebKit (browsers.local.json's MiniBrowser): its driver, the engine, and the
# virtual screen each session runs on.
command -v WebKitWebDriver >/dev/null 2>&1 || need+=(webkit2gtk-driver)
[ -x /usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser ] || need+=(libwebkit2gtk-4.1-0)
command -v xvfb-run >/dev/null 2>&1 || need+=(xvfb xauth)
if [ "${1:-}" = test ]; then
  # For the tests only: ffprobe checks recorded videos; Prometheus, promtool and
  # Alertmanager run the alerting tests; valgrind counts the proxy's
  # instructions (scripts/callgrind-proxy.sh, in make bench-short).
  command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
  command -v ffprobe >/dev/null 2>&1 || need+=(ffmpeg)
  command -v promtool >/dev/null 2>&1 || need+=(prometheus)
  command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
  # gcc builds the shared object of the process launcher's LD_PRELOAD test.
  command -v gcc >/dev/null 2>&1 || need+=(gcc)
  # Ruby's Selenium client: a second client language for the WebKit tests.
  ruby -e 'require "selenium-webdriver"' >/dev/null 2>&1 || need+=(ruby-selenium-webdriver)
fi
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing Debian packages: ${need[*]}" >&2
    echo "deps: run as root: apt-get update && apt-get install -y ${need[*]}" >&2
    exit 1
  fi
  echo "deps: installing ${need[*]}" >&2
  apt-get update -qq
  # Packages install only: the tests start their own Prometheus and Alertmanager
  # on free ports, so no daemon is started by the package scripts.
  policy=/usr/sbin/policy-rc.d
  had_policy=false
  [ -e "$policy" ] && had_policy=true
  $had_policy || { printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 0755 "$policy"; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  $had_policy || rm -f "$policy"
fi
go mod download

# The Docker engine: this kind of machine starts it before a session, but a CI run
# or a fresh machine may not have it running yet.
if command -v docker >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; then
  echo "deps: starting the Docker engine" >&2
  (service docker start || (nohup dockerd >/var/log/dockerd.log 2>&1 &)) >/dev/null 2>&1 || true
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
fi
