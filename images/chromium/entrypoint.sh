#!/bin/sh
# Selenoid's browser image contract: chromedriver on 4444, a virtual screen on
# display :99 sized by SCREEN_RESOLUTION (WxH or WxHxDEPTH, default
# 1920x1080x24), VNC on 5900 when ENABLE_VNC=true, DevTools on 7070, downloads
# on 8080. A browsers.json entry whose caps say --headless ignores the screen.
#
# WEBSUMMONER_HUB_ADDRESSES (set by the hub: the addresses its connections
# come from) makes every service accept those and the container's loopback
# only, so that on a network shared with other sessions a page in another
# browser reaches none of them. Unset (under Selenoid), anyone may connect,
# as with Selenoid's images.
res=${SCREEN_RESOLUTION:-1920x1080x24}
if ! echo "$res" | grep -Eq '^[0-9]{2,5}x[0-9]{2,5}(x(8|16|24))?$'; then
  echo "entrypoint: SCREEN_RESOLUTION=$res is not WxH or WxHxDEPTH; using 1920x1080x24" >&2
  res=1920x1080x24
fi
case $res in *x*x*) ;; *) res="${res}x24" ;; esac
width=${res%%x*}
rest=${res#*x}
height=${rest%%x*}
export DISPLAY=:99
# Listening on no TCP port: a recorder reaches the display through the abstract
# socket @/tmp/.X11-unix/X99, by sharing this container's network namespace.
Xvfb :99 -screen 0 "$res" -nolisten tcp -noreset >/dev/null 2>&1 &
i=0
while [ ! -e /tmp/.X11-unix/X99 ] && [ $i -lt 200 ]; do sleep 0.025; i=$((i+1)); done
# A window manager (fluxbox): without one a browser window cannot be
# maximized or minimized (WebDriver's Maximize Window fails, or does
# nothing). No toolbar and no decorations, so a maximized window is the whole
# screen. fluxbox keeps its files in $HOME/.fluxbox: a directory of its own.
wm=$(mktemp -d)
mkdir -p "$wm/.fluxbox" && cp /etc/websummoner/fluxbox-init "$wm/.fluxbox/init"
HOME=$wm fluxbox -display :99 -log /dev/null >/dev/null 2>&1 &
# The browser's window fills the screen: the image's wrapper at
# /usr/lib/chromium/chromium (build.sh) puts these before the driver's
# arguments, so a client's own --window-size wins.
echo "--window-position=0,0 --window-size=$width,$height" > /etc/websummoner/chromium-flags
hub=$(echo "${WEBSUMMONER_HUB_ADDRESSES:-}" | tr -cd '0-9a-fA-F.:,')
vnc_allow=
[ -n "$hub" ] && vnc_allow="-allow 127.0.0.1,$hub"
if [ "$ENABLE_VNC" = true ]; then
  # shellcheck disable=SC2086
  x11vnc -display :99 -rfbport 5900 -rfbauth /etc/websummoner/vncpasswd -forever -shared -quiet -noxdamage $vnc_allow >/dev/null 2>&1 &
fi
# Chromium binds its debugging port (9222, set by the browsers.json caps) to the
# container's loopback only; the file server carries 7070 to it.
/usr/local/bin/fileserver -dir /home/selenium/Downloads -listen :8080 -forward :7070=127.0.0.1:9222 -allow "$hub" &
exec /usr/bin/chromedriver --port=4444 --allowed-ips="$hub" --allowed-origins='*' "$@"
