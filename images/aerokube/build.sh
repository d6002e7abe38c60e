#!/usr/bin/env bash
# Builds a test image of aerokube's selenoid/chrome from aerokube's own image
# sources (src/, see README.md), so that the hub is tested against the image
# contract Selenoid users bring: aerokube's entrypoint.sh unchanged, its
# fileserver (8080), xseld clipboard (9090) and devtools proxy (7070) built
# from their sources, chromedriver on 4444, x11vnc on 5900 (password
# "selenoid") with ENABLE_VNC=true, fluxbox on Xvfb :99, user selenium.
#
# No registry is reachable, so where aerokube's Dockerfiles start FROM their
# Ubuntu base with Google Chrome, this starts from Debian bookworm (debootstrap,
# `docker import`, as images/chromium/build.sh) with Debian's chromium and
# chromium-driver. The tag carries a hash of what goes in, so a second run
# finds the image and does nothing. Prints the image tag on its last line.
set -euo pipefail
cd "$(dirname "$0")"
hash=$(find build.sh src ../debian-root.sh -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
tag="websummoner/aerokube-chrome:$hash"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi
. ../debian-root.sh
# What selenium/base/Dockerfile and static/chrome/Dockerfile install that the
# entrypoint runs: xvfb-run (xvfb, xauth), fluxbox, wmctrl, x11vnc, xsel (for
# xseld), pulseaudio and pactl, ip (iproute2), ps (procps), jq, certutil
# (libnss3-tools) and openssl for ROOT_CA_*, adduser for the selenium user.
debian_root aerokube-chrome chromium chromium-driver fonts-liberation fonts-dejavu-core ca-certificates \
  xvfb xauth fluxbox wmctrl x11vnc xsel pulseaudio pulseaudio-utils iproute2 procps jq libnss3-tools openssl adduser
# selenium/base/Dockerfile's user and folders.
chroot "$root" adduser --system --home /home/selenium --uid 4096 --ingroup root --disabled-password --shell /bin/bash selenium >&2
mkdir -p "$root/home/selenium/Downloads" "$root/home/selenium/.fluxbox" "$root/usr/share/fluxbox/styles"
install -m 0644 src/base/fluxbox/aerokube src/base/fluxbox/init "$root/usr/share/fluxbox/styles/"
install -m 0644 src/base/fluxbox/aerokube src/base/fluxbox/init "$root/home/selenium/.fluxbox/"
chroot "$root" chown -R selenium:root /home/selenium
chroot "$root" chmod -R g=u /home/selenium
ln -sf /bin/true "$root/usr/bin/xdg-open"
# static/chrome/Dockerfile: Chrome's managed policies (Chromium reads them from
# /etc/chromium; the entrypoint's CH_POLICY_* edits Chrome's path, so that is a
# link to it), and pulseaudio's cookie.
mkdir -p "$root/etc/chromium/policies/managed" "$root/etc/opt/chrome"
install -m 0644 src/chrome/policies.json "$root/etc/chromium/policies/managed/policies.json"
ln -s /etc/chromium/policies "$root/etc/opt/chrome/policies"
chroot "$root" chown -R selenium:root /etc/chromium/policies/managed
echo "cookie-file = ~/.config/pulse/cookie" >>"$root/etc/pulse/client.conf"
debian_root_done
# aerokube's images patch Google Chrome's launcher to add --no-sandbox
# --disable-gpu; chromedriver runs /usr/lib/chromium/chromium here (Debian's
# /usr/bin/chromium wrapper is not used), so the flags go in a wrapper at that
# path, in front of the real binary, which finds its resources next to itself.
# The others keep a container on a small /dev/shm and off the network.
mv "$root/usr/lib/chromium/chromium" "$root/usr/lib/chromium/chromium.bin"
cat >"$root/usr/lib/chromium/chromium" <<'WRAPPER'
#!/bin/sh
# aerokube's devtools finds the browser's DevToolsActivePort in its profile
# at /tmp/.com.google.Chrome* or /tmp/.org.chromium.Chromium*; Debian's
# chromedriver 156 makes it at /tmp/org.chromium.Chromium.scoped_dir.*
# (no dot). A link under the name devtools looks for.
for a in "$@"; do
  case $a in --user-data-dir=/*) ln -sfn "${a#--user-data-dir=}" /tmp/.org.chromium.Chromium.profile ;; esac
done
exec /usr/lib/chromium/chromium.bin --no-sandbox --disable-gpu --disable-dev-shm-usage \
  --disable-background-networking --disable-component-update --disable-sync "$@"
WRAPPER
chmod 0755 "$root/usr/lib/chromium/chromium"
# aerokube's programs, from their sources, as their Dockerfiles build them
# (static binaries here: the image has no Go toolchain and needs no libc match).
for p in fileserver xseld devtools; do
  (cd "src/$p" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$root/usr/bin/$p" .)
done
install -m 0755 src/chrome/entrypoint.sh "$root/entrypoint.sh"
# The root folder is mktemp's (0700): the image's / must be readable by the
# selenium user.
chmod 0755 "$root"
chmod 1777 "$root/tmp"
# EXPOSE 4444 only, as static/chrome/Dockerfile: Selenoid publishes 5900, 7070,
# 8080 and 9090 by its own contract, whatever the image exposes.
tar -C "$root" -c . | docker import \
  --change 'ENTRYPOINT ["/entrypoint.sh"]' \
  --change 'USER selenium' \
  --change 'EXPOSE 4444' \
  --change 'ENV DBUS_SESSION_BUS_ADDRESS=/dev/null LANG=C.UTF-8' \
  - "$tag" >&2
echo "$tag"
