#!/usr/bin/env bash
# Builds a WebKit image from Debian's packages (no container registry is
# needed), as images/chromium/build.sh builds Chromium's: debootstrap a minimal
# Debian into a folder, install WebKitGTK's WebDriver (WebKitWebDriver) and
# browser (MiniBrowser, in libwebkit2gtk-4.1-0), a virtual screen (Xvfb) and a
# VNC server (x11vnc) in it, and `docker import` the folder. The tag carries a
# hash of what goes in, so a second run finds the image and does nothing.
# Prints the image tag on its last line.
#
# The VNC password is "selenoid", as in Selenoid's images and the project's
# Chromium image (docs/live-view.md). WebKit has no DevTools endpoint, so the
# image exposes no 7070 (nor 9090): the hub gives a session se:cdp and the
# clipboard only for side ports an image exposes.
set -euo pipefail
cd "$(dirname "$0")"
hash=$(sha256sum build.sh entrypoint.sh ../debian-root.sh ../../cmd/fileserver/main.go | sha256sum | cut -c1-12)
tag="websummoner/webkit:bookworm-$hash"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi
. ../debian-root.sh
# libgl1-mesa-dri (a recommend of libwebkit2gtk-4.1-0): Mesa's software
# renderer, which WebKit draws with on a screen without a GPU; without it
# MiniBrowser aborts at start ("Could not create surfaceless EGL display").
debian_root webkit webkit2gtk-driver libwebkit2gtk-4.1-0 libgl1-mesa-dri fonts-liberation ca-certificates xvfb x11vnc fluxbox
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
# The file server of Selenoid's contract (port 8080), built from this repo.
(cd ../.. && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$root/usr/local/bin/fileserver" ./cmd/fileserver)
# WebKit saves a download in GLib's XDG download folder, which this file names:
# the folder the file server serves.
mkdir -p "$root/home/selenium/Downloads" "$root/home/selenium/.config"
echo 'XDG_DOWNLOAD_DIR="$HOME/Downloads"' > "$root/home/selenium/.config/user-dirs.dirs"
chmod 1777 "$root/tmp"
tar -C "$root" -c . | docker import \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint"]' \
  --change 'EXPOSE 4444 5900 8080' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV HOME=/home/selenium' \
  - "$tag" >&2
echo "$tag"
