#!/bin/sh
# chromedriver on the container's port 4444, reachable from outside the container
# (the hub reaches it through a port published on the host's 127.0.0.1).
# Selenoid's image contract puts the browser's DevTools on port 7070: Chromium
# binds its debugging port (9222, set by the browsers.json caps) to the
# container's loopback only, so socat carries 7070 to it.
socat TCP-LISTEN:7070,fork,reuseaddr TCP:127.0.0.1:9222 &
# Downloads (browsers.json sets Chromium's download directory to it) on 8080.
/usr/local/bin/fileserver -dir /home/selenium/Downloads -listen :8080 &
exec /usr/bin/chromedriver --port=4444 --allowed-ips= --allowed-origins='*' "$@"
