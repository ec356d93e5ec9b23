# infera-exec build, demo and tests. Everything is built into bin/ and build/.
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BIN       := bin/infera-exec
SANDBOX   := build/sandbox
DEMO      := build/demo
PAYLOAD   := build/payload
OCI       := build/overlay-oci
ARCHIVE   := build/overlay.tar
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
TREES     ?=

.PHONY: all build demo payload overlay-image test bench fuzz vet clean

all: build

# Static, reproducible, version-stamped.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/infera-exec

$(SANDBOX): FORCE
	CGO_ENABLED=0 $(GO) build -o $(SANDBOX) ./internal/testsupport/sandbox/cmd/sandbox

# The binary as the entrypoint of a container-like sandbox: private mounts,
# PID 1, the demo payload at /overlay, a fake ROCm 7 at /opt/rocm, a vLLM
# install with pending fixes at /opt/engine, a model at /opt/models/demo,
# the machine's python3. First the preflight checks (--doctor; it exits 1
# when only warnings failed, which does not stop the demo), the plan
# (--explain), then the real start, then a restart.
DEMO_RUN = $(SANDBOX) -bind $(CURDIR)/$(PAYLOAD):/overlay:ro -bind $(CURDIR)/$(DEMO)/rocm:/opt/rocm:ro \
	-bind $(CURDIR)/$(DEMO)/engine:/opt/engine -bind $(CURDIR)/$(DEMO)/models:/opt/models:ro -nofile 1024 -- \
	env INFERA_REQUIRE_NATIVE=mooncake INFERA_ENGINE_READY_TIMEOUT=90m PYTHONPATH=/opt/engine

demo: build $(SANDBOX)
	$(GO) run ./internal/mkpayload -out $(PAYLOAD) -bin $(BIN) -demo $(DEMO)
	@echo; echo '== infera-exec --doctor: the preflight checks alone =='
	-$(DEMO_RUN) /overlay/bin/infera-exec --doctor python3 -m infera_demo.worker --model /opt/models/demo
	@echo; echo '== infera-exec --explain (changes nothing) =='
	$(DEMO_RUN) /overlay/bin/infera-exec --explain python3 -m infera_demo.worker --model /opt/models/demo
	@echo; echo '== infera-exec as PID 1: patches the engine, execs the worker =='
	$(DEMO_RUN) /overlay/bin/infera-exec python3 -m infera_demo.worker --model /opt/models/demo
	@echo; echo '== a restart: the patches are in place, nothing is written =='
	$(DEMO_RUN) /overlay/bin/infera-exec python3 -m infera_demo.worker --model /opt/models/demo 2>&1 | grep -E '^infera-exec: (vllm|patch)'

# A payload directory with its index: the binary, the trees given as
# TREES="build/wheels/py312:py312 build/native/rocm7-py312:native/rocm7-py312"
# (default: the demo trees), and PATCHES=dir of extra patch definitions.
payload: build
	$(GO) run ./internal/mkpayload -out $(PAYLOAD) -bin $(BIN) $(foreach t,$(TREES),-tree $(t)) $(if $(PATCHES),-patches $(PATCHES))

# The overlay image, without a Docker daemon: FROM scratch, the payload as
# its root filesystem, ENTRYPOINT infera-exec --install, CMD /overlay.
# Written as an OCI image layout (oci:$(OCI):latest) and a docker-archive
# tarball (docker load -i $(ARCHIVE)). Reproducible: set SOURCE_DATE_EPOCH
# to stamp another time than the epoch. Dockerfile.overlay builds the same.
overlay-image: payload
	$(GO) run ./internal/mkimage -payload $(PAYLOAD) -oci $(OCI) -archive $(ARCHIVE) \
		-version $(VERSION) -revision $(COMMIT) -arch $(IMAGE_ARCH)

# The main module, then the Kubernetes examples' checks (a module of their
# own, so k8s.io/api never enters the shim's build).
test: build
	INFERA_EXEC_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 ./...
	cd deploy/k8s/check && $(GO) test -count=1 ./...

bench: build
	INFERA_EXEC_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench . -benchmem -benchtime 50x ./...

# Every fuzz target for FUZZTIME each (go test runs only their seed corpus).
FUZZTIME ?= 30s
fuzz:
	@for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -h '^func Fuzz' $$pkg/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

vet:
	$(GO) vet ./...

clean:
	rm -rf bin build

FORCE:
