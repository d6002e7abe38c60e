# The hub as a container image, with no registry: nothing is pulled. `make image`
# builds a static hub (CGO off, time zone data embedded) into bin/ and copies it
# onto scratch, as goreleaser images and Selenoid's own Dockerfile copy a
# prebuilt binary. Run it with the Docker socket and a browsers.json mounted
# (docs/operations.md):
#
#   docker run -d --name hub -p 127.0.0.1:4444:4444 \
#     -v /var/run/docker.sock:/var/run/docker.sock \
#     --group-add "$(stat -c %g /var/run/docker.sock)" \
#     --sysctl net.ipv4.ip_forward=0 \
#     -v "$PWD/config/browsers.docker.json:/etc/websummoner/browsers.json:ro" \
#     websummoner/hub -instance hub1
FROM scratch
COPY bin/websummoner-static /websummoner
# Not root: the Docker socket's group, added with --group-add, is all it needs.
USER 65532:65532
EXPOSE 4444
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 CMD ["/websummoner", "-healthcheck"]
# Arguments given to docker run follow these: a later -conf wins.
ENTRYPOINT ["/websummoner", "-conf", "/etc/websummoner/browsers.json"]
