# Limen's build. `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
BIN   ?= bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/limenhq/limen/gateway/buildinfo.Version=$(VERSION) \
           -X github.com/limenhq/limen/gateway/buildinfo.Commit=$(COMMIT)
TEST_TIMEOUT ?= 25m

.PHONY: demo help build test unit e2e e2e-constrained compat lint cluster-build cluster-up cluster-down cluster-env opa-test bundle bench bench-quick scale stress chaos soak crowd helm image console-player console-player-check

help: ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# make demo: the story of test/demo/story on a fresh control plane, proxy and worker;
# DEMO_FLAGS=--keep keeps them (and the console) running afterwards until Ctrl-C.
# make test runs the same story as the e2e TestDemoStory.
demo: cluster-build ## Limen's story end to end: log in, kubectl through Limen, what may I do, an exec recorded and played back, a watch ended by a lock, the audit trail, the console (DEMO_FLAGS=--keep stays up)
	$(GO) run ./test/demo $(DEMO_FLAGS)

build: ## build bin/limen
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/limen ./cmd/limen

test: lint opa-test console-player-check cluster-build $(BIN)/helm ## everything CI runs: lint, the console player check, unit tests, control-plane smoke and e2e tests (Helm chart and image included)
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(YAMUX_TEST)

unit: ## unit tests only (no control plane)
	LIMEN_SKIP_CLUSTER=1 $(GO) test -count=1 ./...
	$(YAMUX_TEST)

# The patched yamux of third_party/yamux is a module of its own: upstream's
# suite and Limen's receive-buffer tests, less one test that is flaky as
# released (third_party/yamux/LIMEN.md).
YAMUX_TEST = cd third_party/yamux && $(GO) test -count=1 -skip '^TestHalfCloseSessionShutdown$$' ./...

e2e: cluster-build $(BIN)/helm ## tests against the real control plane only
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./test/...

e2e-constrained: cluster-build ## the e2e suite with the worker under deploy/kube/worker-rbac-constrained.yaml
	LIMEN_E2E_RBAC=constrained $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./test/e2e/

# make compat: the whole client matrix of test/e2e/compat_test.go. make test runs it
# with the oldest and the newest kubectl only.
COMPAT_OUT ?= test/e2e/COMPAT.md

compat: cluster-build $(BIN)/helm ## the client compatibility matrix through Limen: every kubectl.1.NN and the harness's kubectl, client-go, Helm (bin/helm or LIMEN_HELM), the Python client (Debian's python3-kubernetes or LIMEN_PYTHON), the JavaScript client (@kubernetes/client-node, pinned in test/e2e/testdata/client-node, npm ci once into ~/.cache/limen/npm, or LIMEN_CLIENT_NODE); prints it and writes test/e2e/COMPAT.md
	@LIMEN_COMPAT=all LIMEN_COMPAT_OUT=$(abspath $(COMPAT_OUT)) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '^TestCompat$$' ./test/e2e/; \
	  rc=$$?; cat $(COMPAT_OUT); exit $$rc

# Helm, pinned in tools/go.mod (a module of its own, so that Helm's Kubernetes
# libraries never move the main module's). The chart tests in test/e2e run
# bin/helm; other targets may too: the path and the target stay.
$(BIN)/helm: tools/go.mod tools/go.sum
	cd tools && $(GO) build -o ../$(BIN)/helm helm.sh/helm/v3/cmd/helm

helm: $(BIN)/helm ## build bin/helm, the Helm pinned in tools/go.mod

# The container image as an OCI image layout, built without a daemon
# (deploy/image): the static binary on the Dockerfile's distroless layout.
# Push it with `crane push $(BIN)/limen-oci REF` or
# `skopeo copy oci:$(BIN)/limen-oci docker://REF`.
IMAGE ?= ghcr.io/limenhq/limen
image: ## write the container image as an OCI layout to bin/limen-oci (no daemon needed), and check it runs limen version
	@mkdir -p $(BIN)/image
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(BIN)/image/limen ./cmd/limen
	$(GO) run ./deploy/image -binary $(BIN)/image/limen -out $(BIN)/limen-oci -ref $(IMAGE):$(VERSION) -version $(VERSION) -check

# The console's asciinema-player, vendored from npm at the version pinned in
# gateway/console/assets/player/VERSION (tarball integrity in INTEGRITY).
console-player: ## refresh the console's vendored asciinema-player from npm at its pinned version
	bash gateway/console/player.sh refresh

console-player-check: ## check the console's vendored asciinema-player against the pinned npm package
	bash gateway/console/player.sh check

lint: ## go vet and a gofmt check
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi

cluster-build: ## build (once, cached) kube-apiserver, controller-manager, scheduler and etcd
	$(GO) run ./test/cluster build

cluster-up: ## start a local control plane and print its KUBECONFIG
	$(GO) run ./test/cluster up

cluster-down: ## stop the control plane started by cluster-up
	$(GO) run ./test/cluster down

cluster-env: ## print the export line for the running control plane
	@$(GO) run ./test/cluster env

# make stress: the full run. The slice inside make test is `go test ./test/stress` with its
# defaults (2 runs of 16 MiB, 2 at once).
STRESS_RUNS ?= 30
STRESS_MIB  ?= 64
STRESS_CONCURRENCY ?= 3
STRESS_REPORT ?= $(BIN)/stress-report.md

stress: cluster-build ## exec, cp, port-forward both ways on every transport via Limen and direct under CPU load, 30 runs × 64 MiB each (STRESS_RUNS, STRESS_MIB), bytes and SHA-256 checked
	@mkdir -p $(BIN)
	LIMEN_STRESS_RUNS=$(STRESS_RUNS) LIMEN_STRESS_MIB=$(STRESS_MIB) LIMEN_STRESS_CONCURRENCY=$(STRESS_CONCURRENCY) \
	  LIMEN_STRESS_REPORT=$(abspath $(STRESS_REPORT)) \
	  $(GO) test -count=1 -v -timeout 4h -run '^TestStress$$' ./test/stress

# make chaos: the failure scenarios under load (issue #32): kill -9 of the worker, the
# proxy and the API server (test/chaos), the disk, bundle-server, token and clock faults
# (test/faults), each with its figures appended to CHAOS_REPORT, emptied first. make test
# runs one slice of each (the worker kill, the bundle server's 500s).
CHAOS_REPORT ?= $(BIN)/chaos-report.md
CHAOS_PKGS   := ./test/chaos ./test/faults

chaos: cluster-build ## every crash and fault scenario under load, invariants checked (< 20 min); figures in CHAOS_REPORT (bin/chaos-report.md)
	@mkdir -p $(BIN)
	@rm -f $(CHAOS_REPORT)
	LIMEN_CHAOS=1 CHAOS_REPORT=$(abspath $(CHAOS_REPORT)) \
	  $(GO) test -count=1 -v -p 1 -timeout 20m $(CHAOS_PKGS)
	@echo "chaos figures: $(CHAOS_REPORT)"

# make soak: not in make test (TestSoak skips without LIMEN_SOAK). SOAK_DURATION is a Go
# duration, at most 24h.
SOAK_DURATION ?= 1h
SOAK_REPORT   ?= $(BIN)/soak-report.md

soak: cluster-build ## idle watches, a followed log and a port-forward held open through Limen for SOAK_DURATION (1h) with traffic; fails on a drop or on memory/goroutine growth; report in SOAK_REPORT
	@mkdir -p $(BIN)
	LIMEN_SOAK=1 LIMEN_SOAK_DURATION=$(SOAK_DURATION) LIMEN_SOAK_REPORT=$(abspath $(SOAK_REPORT)) \
	  $(GO) test -count=1 -v -timeout 25h -run '^TestSoak$$' ./test/soak

# make crowd: the slice inside make test is `go test ./test/crowd` (50 streams).
CROWD_STREAMS ?= 1000
CROWD_REPORT  ?= $(BIN)/crowd-report.md

crowd: cluster-build ## CROWD_STREAMS (1000) watches, followed logs and execs through one proxy and worker, then one lock: each ends within 1 s, memory and goroutines back to baseline; report in CROWD_REPORT
	@mkdir -p $(BIN)
	LIMEN_CROWD=1 LIMEN_CROWD_STREAMS=$(CROWD_STREAMS) LIMEN_CROWD_REPORT=$(abspath $(CROWD_REPORT)) \
	  $(GO) test -count=1 -v -timeout 1h -run '^TestCrowd$$' ./test/crowd

OPA ?= $(GO) tool opa
# The bundle signing key. The committed default is a TEST key (see bundles/README.md);
# production builds pass SIGNING_KEY=/path/to/real-key.pem.
SIGNING_KEY ?= bundles/testkeys/TEST-ONLY-signing-key.pem
# Bundle revisions are unsigned integers that only move forward (policies/README.md,
# "Revisions"); the default is the build time, YYYYMMDDhhmmss in UTC.
ifndef BUNDLE_REVISION
BUNDLE_REVISION := $(shell date -u +%Y%m%d%H%M%S)
endif

opa-test: ## Rego: opa fmt, opa check --strict and opa test, with the OPA pinned in go.mod
	$(OPA) fmt --list --fail policies rego_test
	$(OPA) check --strict policies rego_test
	$(OPA) test policies rego_test

bundle: ## build and sign bin/limen-bundle.tar.gz from policies/ and bundles/example/ with OPA's build
	@case "$(BUNDLE_REVISION)" in ''|*[!0-9]*|0?*) \
	  echo "BUNDLE_REVISION=$(BUNDLE_REVISION): want an unsigned integer without leading zeros, higher than the last published one (default: the UTC build time YYYYMMDDhhmmss)" >&2; exit 1;; esac
	rm -rf $(BIN)/bundle-src && mkdir -p $(BIN)/bundle-src
	cp policies/*.rego bundles/example/data.json $(BIN)/bundle-src/
	cd $(BIN)/bundle-src && $(OPA) build --bundle . --revision "$(BUNDLE_REVISION)" \
	  --signing-key $(abspath $(SIGNING_KEY)) --signing-alg RS256 -o $(abspath $(BIN)/limen-bundle.tar.gz)
	@echo "signed bundle: $(BIN)/limen-bundle.tar.gz (revision $(BUNDLE_REVISION), key $(SIGNING_KEY))"

bench: ## Limen against direct API server access on the local control plane; writes bench/RESULTS.md (~10 min)
	$(GO) run ./bench/cmd/limen-bench -label "make bench" -out bench/RESULTS.md

bench-quick: ## a short bench run (< 2 min: fewer requests and watches), for regressions; writes bench/RESULTS.md
	$(GO) run ./bench/cmd/limen-bench -quick -label "make bench-quick" -out bench/RESULTS.md

scale: ## the capacity figures of docs/SCALE.md: two proxies and a worker on a real PostgreSQL, database writes, NOTIFY and lock fan-out, memory per tunnel and watch (~3 min; LIMEN_SCALE_* sizes it)
	LIMEN_SCALE=1 $(GO) test ./bench/scale/ -run TestScaleFigures -count=1 -v -timeout 30m
