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
hash=$(sha256sum build.sh entrypoint.sh ../debian-root.sh ../../cmd/fileserver/main.go | sha256sum | cut -c1-12)
tag="websummoner/chromium:bookworm-$hash"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi
. ../debian-root.sh
debian_root chromium chromium chromium-driver fonts-liberation ca-certificates socat xvfb x11vnc fluxbox
mkdir -p "$root/etc/websummoner"
# fluxbox's settings (entrypoint.sh): configVersion 13 keeps Debian's fluxbox
# from replacing the file with its defaults.
printf 'session.configVersion: 13\nsession.screen0.toolbar.visible: false\nsession.screen0.defaultDeco: NONE\nsession.screen0.workspaces: 1\n' > "$root/etc/websummoner/fluxbox-init"
# No wallpaper: fluxbox's fbsetbg, finding no program to set Debian's style's
# wallpaper with, puts up a dialog in the middle of the screen, which every
# screenshot and video would show. Without it the root stays as Xvfb makes it.
rm -f "$root/usr/bin/fbsetbg"
chroot "$root" x11vnc -storepasswd selenoid /etc/websummoner/vncpasswd >/dev/null 2>&1
debian_root_done
install -m 0755 entrypoint.sh "$root/usr/local/bin/entrypoint"
# chromedriver runs /usr/lib/chromium/chromium itself (since Debian's 156, not
# the /usr/bin/chromium wrapper that reads /etc/chromium.d), so the flags the
# image's screen needs go in at that path: a wrapper in front of the real
# binary, which finds its resources next to itself (/proc/self/exe).
mv "$root/usr/lib/chromium/chromium" "$root/usr/lib/chromium/chromium.bin"
cat > "$root/usr/lib/chromium/chromium" <<'WRAPPER'
#!/bin/sh
# The flags the entrypoint wrote for this container's screen, before the
# driver's: a client's own --window-size comes later and wins.
flags=
[ -r /etc/websummoner/chromium-flags ] && flags=$(cat /etc/websummoner/chromium-flags)
exec /usr/lib/chromium/chromium.bin $flags "$@"
WRAPPER
chmod 0755 "$root/usr/lib/chromium/chromium"
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
