#!/usr/bin/env bash
# Builds the video recorder image from Debian's ffmpeg (no container registry is
# needed): debootstrap a minimal Debian, install ffmpeg, `docker import` it. The
# hub starts one next to a browser container that asked for enableVideo, in the
# browser's network namespace, where it records display :99 (x11grab) into
# /data/$FILE_NAME until it is sent SIGINT. The environment is Selenoid's
# recorder contract (FILE_NAME, VIDEO_SIZE, FRAME_RATE, CODEC), so the two
# recorders interchange. The tag carries a hash of what goes in; the image is also
# tagged websummoner/recorder:latest, -video-recorder-image's default.
# Prints the image tag on its last line.
set -euo pipefail
cd "$(dirname "$0")"
hash=$(sha256sum build.sh entrypoint.sh | sha256sum | cut -c1-12)
tag="websummoner/recorder:bookworm-$hash"
if docker image inspect "$tag" >/dev/null 2>&1; then
  docker tag "$tag" websummoner/recorder:latest
  echo "$tag"
  exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d /tmp/websummoner-recorder.XXXXXX)
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
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ffmpeg >&2
chroot "$root" apt-get clean
umount "$root/proc"
rm -rf "$root/var/lib/apt/lists/"* "$root/usr/share/doc" "$root/usr/share/man" "$root/etc/resolv.conf"
install -m 0755 entrypoint.sh "$root/usr/local/bin/entrypoint"
mkdir -p "$root/data"
tar -C "$root" -c . | docker import \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint"]' \
  --change 'ENV LANG=C.UTF-8' \
  - "$tag" >&2
docker tag "$tag" websummoner/recorder:latest
echo "$tag"
