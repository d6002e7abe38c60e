#!/usr/bin/env bash
# Builds a real Chromium + chromedriver image from Debian's packages (no container
# registry is needed): debootstrap a minimal Debian into a folder, install chromium,
# chromium-driver, a virtual screen (Xvfb) and a VNC server (x11vnc) in it, and
# `docker import` the folder. The tag carries a hash of what goes in, so a second
# run finds the image and does nothing. Prints the image tag on its last line.
#
# The VNC password is "selenoid", as in Selenoid's images, so selenoid-ui and
# noVNC clients configured for those work unchanged (docs/live-view.md).
set -euo pipefail
cd "$(dirname "$0")"
hash=$(sha256sum build.sh entrypoint.sh ../../cmd/fileserver/main.go | sha256sum | cut -c1-12)
tag="websummoner/chromium:bookworm-$hash"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d /tmp/websummoner-chromium.XXXXXX)
trap 'umount "$root/proc" 2>/dev/null || true; rm -rf "$root"' EXIT
echo "building $tag in $root (a few minutes)" >&2
debootstrap --variant=minbase bookworm "$root" "$mirror" >&2
cat > "$root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
SOURCES
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
chroot "$root" apt-get update -qq >&2
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  chromium chromium-driver fonts-liberation ca-certificates socat xvfb x11vnc >&2
chroot "$root" apt-get clean
mkdir -p "$root/etc/websummoner"
chroot "$root" x11vnc -storepasswd selenoid /etc/websummoner/vncpasswd >/dev/null 2>&1
umount "$root/proc"
rm -rf "$root/var/lib/apt/lists/"* "$root/usr/share/doc" "$root/usr/share/man" "$root/etc/resolv.conf"
install -m 0755 entrypoint.sh "$root/usr/local/bin/entrypoint"
# The file server of Selenoid's contract (port 8080), built from this repo.
(cd ../.. && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$root/usr/local/bin/fileserver" ./cmd/fileserver)
mkdir -p "$root/home/selenium/Downloads"
chmod 1777 "$root/tmp"
tar -C "$root" -c . | docker import \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint"]' \
  --change 'EXPOSE 4444 5900 7070 8080' \
  --change 'ENV LANG=C.UTF-8' \
  - "$tag" >&2
echo "$tag"
