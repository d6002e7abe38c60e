#!/bin/sh
# chromedriver on the container's port 4444, reachable from outside the container
# (the hub reaches it through a port published on the host's 127.0.0.1).
exec /usr/bin/chromedriver --port=4444 --allowed-ips= --allowed-origins='*' "$@"
