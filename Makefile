# WebSummoner. `make run` serves a real headless Chromium on :4444; `make test`
# installs what the tests need, starts the Kubernetes test cluster, and runs
# them all (CI runs exactly this).
GO ?= go
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)

.PHONY: build run deps test-deps images image test unit e2e bench bench-short callgrind fuzz vet clean k8s-up k8s-down k8s-e2e

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/websummoner ./cmd/websummoner
	$(GO) build -o bin/wdstub ./cmd/wdstub

deps:
	scripts/deps.sh

test-deps:
	scripts/deps.sh test

# The hub as a container image (Dockerfile): a static binary on scratch.
IMAGE ?= websummoner/hub:$(VERSION)
image:
	CGO_ENABLED=0 $(GO) build -trimpath -tags timetzdata -ldflags "-s -w -X main.version=$(VERSION)" -o bin/websummoner-static ./cmd/websummoner
	docker build -q -t $(IMAGE) -t websummoner/hub:latest . >/dev/null
	@echo $(IMAGE)

# ARGS are passed to the hub: make run ARGS='-limit 2 -queue-timeout 5m'
run: deps
	scripts/run-hub.sh $(ARGS)

# The test images: a FROM scratch stub driver, real Chromium built from
# Debian's packages, the video recorder, and aerokube's selenoid/chrome built
# from aerokube's own sources (minutes the first time, then cached by tag).
images:
	images/wdstub/build.sh
	images/chromium/build.sh
	images/recorder/build.sh
	images/aerokube/build.sh
	images/webkit/build.sh

# The Kubernetes tests and the kube benchmark run on the test cluster
# (k8s-up: built the first time, then started in seconds, and left running;
# make k8s-down stops it).
K8S_KUBECONFIG = $(or $(WEBSUMMONER_K8S_DIR),/tmp/websummoner-k8s)/admin.kubeconfig

test: test-deps vet images k8s-up
	WEBSUMMONER_KUBECONFIG=$(K8S_KUBECONFIG) $(MAKE) bench-short
	WEBSUMMONER_KUBECONFIG=$(K8S_KUBECONFIG) $(GO) test -race -count=1 -timeout 30m ./...

unit:
	$(GO) test -race -count=1 ./internal/... ./cmd/...

e2e: test-deps images
	$(GO) test -count=1 -v ./e2e/

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# Every benchmark: the Go benchmarks, then every load-tool scenario at full size
# (over an hour, most of it the soak), writing results and charts to
# docs/bench/. SELENOID names a Selenoid binary built by hand from its source,
# for the realbrowser row's third column.
SELENOID ?=
bench:
	WEBSUMMONER_BENCH=1 $(GO) test -count=1 -run '^(TestProxyOverheadTargets|TestWaiterMemory)$$' -v ./internal/hub | tee docs/bench/proxy-inproc.txt
	$(GO) test -run '^$$' -bench . -benchmem ./internal/... | tee docs/bench/go-bench.txt
	$(GO) run ./cmd/wsbench -out docs/bench $(if $(SELENOID),-selenoid $(SELENOID)) | tee docs/bench/wsbench.txt
	$(GO) run ./cmd/wsbench -scenario waiters -waiters 15000 | tee docs/bench/wsbench-waiters-15k.txt
	WEBSUMMONER_VIDEO_COST=20 WEBSUMMONER_VIDEO_COST_OUT=$(CURDIR)/docs/bench/video-cost.txt $(GO) test -count=1 -v -run '^TestVideoCost$$' ./e2e
	scripts/callgrind-proxy.sh | tee docs/bench/callgrind-proxy.txt

# The hub's own instructions per proxied command against a direct command's
# (valgrind's callgrind: the same count on a busy or drifting machine).
callgrind:
	scripts/callgrind-proxy.sh

# Every fuzz target for FUZZTIME each (their seed corpora run in make test).
FUZZTIME ?= 5m
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseNewSession$$' -fuzztime $(FUZZTIME) ./internal/webdriver
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/config
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/auth
	$(GO) test -run '^$$' -fuzz '^FuzzSessionPath$$' -fuzztime $(FUZZTIME) ./internal/hub
	$(GO) test -run '^$$' -fuzz '^FuzzCommandHead$$' -fuzztime $(FUZZTIME) ./internal/hub
	$(GO) test -run '^$$' -fuzz '^FuzzDriverAnswer$$' -fuzztime $(FUZZTIME) ./internal/hub

# A short run of every benchmark and scenario, so they can't rot: seconds each,
# and a 2-minute soak against hostile drivers.
bench-short:
	$(GO) test -run '^$$' -bench . -benchtime 10x ./internal/...
	$(GO) run ./cmd/wsbench -short
	WEBSUMMONER_BENCH=1 $(GO) test -count=1 -run '^(TestProxyOverheadTargets|TestWaiterMemory)$$' ./internal/hub
	WEBSUMMONER_VIDEO_COST=2 $(GO) test -count=1 -run '^TestVideoCost$$' ./e2e
	scripts/callgrind-proxy.sh 200

clean:
	rm -rf bin

# A real single-node Kubernetes cluster built from sources (docs/kubernetes-cluster.md):
# the first run builds its binaries (long: docs/kubernetes-cluster.md), later runs
# start it in seconds. k8s-up prints the admin kubeconfig's path.
k8s-up:
	scripts/k8s-up.sh

k8s-down:
	scripts/k8s-down.sh

# The Kubernetes launcher's end-to-end tests alone (make test runs them too).
k8s-e2e: test-deps images k8s-up
	WEBSUMMONER_KUBECONFIG=$(K8S_KUBECONFIG) $(GO) test -count=1 -v -run '^TestKube' ./e2e/
