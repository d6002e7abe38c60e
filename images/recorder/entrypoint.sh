#!/bin/sh
# Records the browser's screen into /data/$FILE_NAME until SIGINT or SIGTERM,
# when ffmpeg writes the file's index and exits: the hub stops it with SIGINT,
# Selenoid with SIGTERM, and either ends the file the same way (ffmpeg runs as
# this script's child, which passes both on to it as SIGINT; as PID 1 itself a
# signal it has no handler for yet would be ignored). The recorder shares the browser
# container's network namespace: DISPLAY :99 is reached through Xvfb's abstract
# socket, so the browser's screen is never on a TCP port. With an image that
# serves its display on TCP instead (Selenoid's), BROWSER_CONTAINER_NAME:99 does.
file=${FILE_NAME:-video.mp4}
size=${VIDEO_SIZE:-1920x1080}
rate=${FRAME_RATE:-12}
codec=${CODEC:-libx264}
display=${DISPLAY:-:99}
i=0
stopped=
trap 'stopped=1' INT TERM
# The display may not be up yet: the browser container started a moment ago.
while ! grep -q "@/tmp/.X11-unix/X${display#:}" /proc/net/unix 2>/dev/null; do
  [ -n "$stopped" ] && exit 0 # stopped before anything was recorded
  i=$((i+1))
  if [ $i -ge 400 ]; then
    if [ -n "$BROWSER_CONTAINER_NAME" ]; then display="$BROWSER_CONTAINER_NAME$display"; break; fi
    echo "recorder: display $display did not appear within 10s" >&2
    exit 1
  fi
  sleep 0.025
done
preset=
[ "$codec" = libx264 ] && preset="-preset ultrafast"
# VIDEO_MAX_SIZE (the hub's -video-max-size): ffmpeg stops at that many bytes
# and ends the file as on SIGINT, so what the page shows bounds no disk.
limit=
case "${VIDEO_MAX_SIZE:-}" in
  ''|0|*[!0-9]*) ;;
  *) limit="-fs $VIDEO_MAX_SIZE" ;;
esac
[ -n "$stopped" ] && exit 0
# shellcheck disable=SC2086 # preset and limit are two words or none
ffmpeg -nostdin -hide_banner -loglevel warning -y \
  -f x11grab -draw_mouse 0 -video_size "$size" -framerate "$rate" -i "$display" \
  -codec:v "$codec" $preset -pix_fmt yuv420p -filter:v 'pad=ceil(iw/2)*2:ceil(ih/2)*2' \
  $limit "/data/$file" &
pid=$!
trap 'stopped=1; kill -INT "$pid" 2>/dev/null' INT TERM
# wait returns when a trapped signal arrives; ffmpeg then finishes the file.
status=0
while kill -0 "$pid" 2>/dev/null; do
  wait "$pid"
  status=$?
done
# Stopped as asked, the recording is complete: not a failure.
[ -n "$stopped" ] && exit 0
exit "$status"
