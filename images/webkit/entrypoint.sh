#!/bin/sh
# Selenoid's browser image contract, as images/chromium/entrypoint.sh keeps it,
# for WebKit: WebKitWebDriver on 4444 (it starts MiniBrowser, whose path and
# --automation the browsers.json entry's webkitgtk:browserOptions give), a
# virtual screen on display :99 sized by SCREEN_RESOLUTION (WxH or WxHxDEPTH,
# default 1920x1080x24), VNC on 5900 when ENABLE_VNC=true, downloads on 8080.
# No DevTools: WebKit has none.
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
hub=$(echo "${WEBSUMMONER_HUB_ADDRESSES:-}" | tr -cd '0-9a-fA-F.:,')
vnc_allow=
[ -n "$hub" ] && vnc_allow="-allow 127.0.0.1,$hub"
if [ "$ENABLE_VNC" = true ]; then
  # shellcheck disable=SC2086
  x11vnc -display :99 -rfbport 5900 -rfbauth /etc/websummoner/vncpasswd -forever -shared -quiet -noxdamage $vnc_allow >/dev/null 2>&1 &
fi
# The download folder: $HOME/.config/user-dirs.dirs (build.sh) names
# $HOME/Downloads, where WebKit saves and the file server serves.
export HOME=/home/selenium
# WebKit's own sandbox for its web processes (bubblewrap) cannot make the
# namespaces it needs under Docker's default seccomp profile; WebKit 2.50
# notices and runs them unsandboxed anyway. Said here, so that it is so on
# every engine: the container is the boundary, as Chromium's --no-sandbox in
# the chrome entry of browsers.json.
export WEBKIT_DISABLE_SANDBOX_THIS_IS_DANGEROUS=1
if [ -z "$hub" ]; then
  /usr/local/bin/fileserver -dir "$HOME/Downloads" -listen :8080 &
  exec /usr/bin/WebKitWebDriver --port=4444 --host=all "$@"
fi
# WebKitWebDriver has no allow-list (chromedriver's --allowed-ips): it listens
# on the container's loopback, and the file server carries 4444 to it for the
# hub's addresses only.
/usr/local/bin/fileserver -dir "$HOME/Downloads" -listen :8080 -forward :4444=127.0.0.1:4445 -allow "$hub" &
exec /usr/bin/WebKitWebDriver --port=4445 --host=127.0.0.1 "$@"
