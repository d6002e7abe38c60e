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
hash=$(sha256sum build.sh entrypoint.sh ../debian-root.sh | sha256sum | cut -c1-12)
tag="websummoner/recorder:bookworm-$hash"
if docker image inspect "$tag" >/dev/null 2>&1; then
  docker tag "$tag" websummoner/recorder:latest
  echo "$tag"
  exit 0
fi
. ../debian-root.sh
debian_root recorder ffmpeg
debian_root_done
install -m 0755 entrypoint.sh "$root/usr/local/bin/entrypoint"
mkdir -p "$root/data"
tar -C "$root" -c . | docker import \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint"]' \
  --change 'ENV LANG=C.UTF-8' \
  - "$tag" >&2
docker tag "$tag" websummoner/recorder:latest
echo "$tag"
