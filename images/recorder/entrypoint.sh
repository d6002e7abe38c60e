#!/bin/sh
# Records the browser's screen into /data/$FILE_NAME until SIGINT, when ffmpeg
# writes the file's index and exits. The recorder shares the browser
# container's network namespace: DISPLAY :99 is reached through Xvfb's abstract
# socket, so the browser's screen is never on a TCP port. With an image that
# serves its display on TCP instead (Selenoid's), BROWSER_CONTAINER_NAME:99 does.
file=${FILE_NAME:-video.mp4}
size=${VIDEO_SIZE:-1920x1080}
rate=${FRAME_RATE:-12}
codec=${CODEC:-libx264}
display=${DISPLAY:-:99}
i=0
# The display may not be up yet: the browser container started a moment ago.
while ! grep -q "@/tmp/.X11-unix/X${display#:}" /proc/net/unix 2>/dev/null; do
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
# shellcheck disable=SC2086 # preset is two words or none
exec ffmpeg -nostdin -hide_banner -loglevel warning -y \
  -f x11grab -draw_mouse 0 -video_size "$size" -framerate "$rate" -i "$display" \
  -codec:v "$codec" $preset -pix_fmt yuv420p -filter:v 'pad=ceil(iw/2)*2:ceil(ih/2)*2' \
  "/data/$file"
