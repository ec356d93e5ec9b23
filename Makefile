# infera-exec build, demo and tests. Everything is built into bin/ and build/.
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
# The entry point first reads the signal dispositions the process was given
# (internal/sigstart), before the Go runtime replaces them; amd64 only:
# elsewhere build with ENTRY= .
ENTRY     ?= -E=github.com/infera/infera-exec/internal/sigstart.entry
LDFLAGS   := -s -w $(ENTRY) -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BIN       := bin/infera-exec
PAYLOAD_TOOL := bin/infera-payload
LINT      := bin/infera-lint
SANDBOX   := build/sandbox
DEMO      := build/demo
PAYLOAD   := build/payload
OCI       := build/overlay-oci
ARCHIVE   := build/overlay.tar
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
# Debian's busybox-static (apt-get install busybox-static): sh and cp of
# the v0.2.2 init container line in the overlay image, with its copyright.
BUSYBOX   ?= /bin/busybox
BUSYBOX_COPYRIGHT ?= /usr/share/doc/busybox-static/copyright
TREES     ?=

.PHONY: all build demo payload overlay-image release release-version release-check test test-long test-runtime bench fuzz vet clean

all: build

# Go modules: the shim's, and the build-time tools' (tools/: infera-payload
# and go-containerregistry, which never enter the shim's build).
MODULES   := . tools

# The shim: static, reproducible, version-stamped. Then infera-payload, the
# payload and image builder, from the tools module, and infera-lint, the
# manifest linter, from the deploy/k8s module (k8s.io/api stays there).
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/infera-exec
	cd tools && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -X main.version=$(VERSION)' -o ../$(PAYLOAD_TOOL) ./cmd/infera-payload
	cd deploy/k8s && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -X main.version=$(VERSION)' -o ../../$(LINT) ./lint/cmd/infera-lint

$(SANDBOX): FORCE
	CGO_ENABLED=0 $(GO) build -o $(SANDBOX) ./internal/testsupport/sandbox/cmd/sandbox

# The binary as the entrypoint of a container-like sandbox: private mounts,
# PID 1, the demo payload at /overlay, a fake ROCm 7 at /opt/rocm, a vLLM
# install with pending fixes at /opt/engine, a model at /opt/models/demo,
# the machine's python3. First the preflight checks (--doctor; its exit 1,
# warnings only, is said in words and does not stop the demo), the plan
# (--explain), then the real start, then a restart.
DEMO_RUN = $(SANDBOX) -bind $(CURDIR)/$(PAYLOAD):/overlay:ro -bind $(CURDIR)/$(DEMO)/rocm:/opt/rocm:ro \
	-bind $(CURDIR)/$(DEMO)/engine:/opt/engine -bind $(CURDIR)/$(DEMO)/models:/opt/models:ro -nofile 1024 -- \
	env INFERA_REQUIRE_NATIVE=mooncake INFERA_ENGINE_READY_TIMEOUT=90m PYTHONPATH=/opt/engine

demo: build $(SANDBOX)
	$(PAYLOAD_TOOL) index -out $(PAYLOAD) -bin $(BIN) -demo $(DEMO)
	@echo; echo '== infera-exec --doctor: the preflight checks alone =='
	@$(DEMO_RUN) /overlay/bin/infera-exec --doctor python3 -m infera_demo.worker --model /opt/models/demo; rc=$$?; \
	  case $$rc in 0) ;; 1) echo '(--doctor exit 1: warnings only, which do not stop a start)';; *) exit $$rc;; esac
	@echo; echo '== infera-exec --explain (changes nothing) =='
	$(DEMO_RUN) /overlay/bin/infera-exec --explain python3 -m infera_demo.worker --model /opt/models/demo
	@echo; echo '== infera-exec as PID 1: patches the engine, execs the worker =='
	$(DEMO_RUN) /overlay/bin/infera-exec python3 -m infera_demo.worker --model /opt/models/demo
	@echo; echo '== a restart: the patches are in place, nothing is written =='
	$(DEMO_RUN) /overlay/bin/infera-exec python3 -m infera_demo.worker --model /opt/models/demo 2>&1 | grep -E '^infera-exec: (vllm|patch)'

# A payload directory with its index: the binary, the trees given as
# TREES="build/wheels/py312:py312 build/native/rocm7-py312:native/rocm7-py312"
# (default: the DEMO trees, which serve no real engine: said loudly), and
# PATCHES=dir of extra patch definitions.
payload: build
	@if [ -z "$(TREES)" ]; then echo '*** make payload: no TREES given: the payload holds the DEMO trees, not real wheels or native trees.'; \
	  echo '*** For a real payload: make payload TREES="build/wheels/py312:py312 build/native/rocm7-py312:native/rocm7-py312"'; fi
	$(PAYLOAD_TOOL) index -out $(PAYLOAD) -bin $(BIN) $(foreach t,$(TREES),-tree $(t)) $(if $(PATCHES),-patches $(PATCHES))

# The overlay image, without a Docker daemon: FROM scratch, the payload as
# its root filesystem, ENTRYPOINT infera-exec --install, CMD /overlay; the
# payload also at /payload and BUSYBOX as sh and cp, so v0.2.2's init
# container `sh -c "cp -a /payload/. /overlay/"` runs unchanged.
# Written as an OCI image layout (oci:$(OCI):latest) and a docker-archive
# tarball (docker load -i $(ARCHIVE)). Reproducible: set SOURCE_DATE_EPOCH
# to stamp another time than the epoch. Dockerfile.overlay builds the same.
overlay-image: payload
	$(PAYLOAD_TOOL) image -payload $(PAYLOAD) -oci $(OCI) -archive $(ARCHIVE) \
		-version $(VERSION) -revision $(COMMIT) -arch $(IMAGE_ARCH) \
		-busybox $(BUSYBOX) -busybox-copyright $(BUSYBOX_COPYRIGHT)

# A release: make release VERSION=vMAJOR.MINOR.PATCH[-PRE] (semver, with
# its section in CHANGELOG.md) writes DIST: the static infera-exec,
# infera-payload and infera-lint stamped with VERSION (--version), the
# overlay image of `make payload` as a docker-archive (TREES as for make
# payload; without them the DEMO trees, said loudly), sbom.cdx.json
# (CycloneDX 1.5 of every module the binaries link, from their build
# information: tools/sbom, and of the Debian package busybox comes from)
# and SHA256SUMS. Every time in it is
# SOURCE_DATE_EPOCH, by default the commit's, so the same commit gives the
# same bytes: make release-check builds it twice, the second time with an
# empty Go build cache, and compares.
DIST      ?= dist
SBOM_TOOL := build/infera-sbom
SEMVER    := ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$$
RELEASE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
RELEASE_FILES := infera-exec infera-payload infera-lint infera-overlay.tar sbom.cdx.json
# The Debian package BUSYBOX comes from, for the SBOM (none if no package
# owns the file).
BUSYBOX_PKG = $(shell dpkg-query -S $(BUSYBOX) 2>/dev/null | sed -n 's/^\([^:,]*\): .*/\1/p' | head -1)
BUSYBOX_DEB = $(if $(BUSYBOX_PKG),-deb '$(BUSYBOX_PKG)=$(shell dpkg-query -W -f='$${Version}=$${Architecture}' $(BUSYBOX_PKG))=$(BUSYBOX)=infera-overlay.tar:/usr/bin/busybox')
release-version:
	@echo '$(VERSION)' | grep -Eq '$(SEMVER)' || { echo "make release: VERSION=$(VERSION) is not a semver tag: make release VERSION=vMAJOR.MINOR.PATCH (e.g. v0.3.0)" >&2; exit 2; }
	@grep -Fq '## $(VERSION) ' CHANGELOG.md || grep -Fxq '## $(VERSION)' CHANGELOG.md || { echo "make release: CHANGELOG.md has no section '## $(VERSION)': say what changed before releasing it" >&2; exit 2; }
	@[ -n "$(DIST)" ] && [ "$(DIST)" != / ] || { echo "make release: DIST must name a directory of its own" >&2; exit 2; }

release: release-version payload
	cd tools && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-X main.version=$(VERSION)' -o ../$(SBOM_TOOL) ./cmd/infera-sbom
	rm -rf $(DIST) && mkdir -p $(DIST)
	cp $(BIN) $(PAYLOAD_TOOL) $(LINT) $(DIST)/
	SOURCE_DATE_EPOCH=$(RELEASE_EPOCH) $(PAYLOAD_TOOL) image -q -payload $(PAYLOAD) -oci '' -archive $(DIST)/infera-overlay.tar \
		-version $(VERSION) -revision $(COMMIT) -arch $(IMAGE_ARCH) -busybox $(BUSYBOX) -busybox-copyright $(BUSYBOX_COPYRIGHT)
	SOURCE_DATE_EPOCH=$(RELEASE_EPOCH) $(SBOM_TOOL) -name infera-exec -version $(VERSION) -o $(DIST)/sbom.cdx.json $(BUSYBOX_DEB) \
		$(DIST)/infera-exec $(DIST)/infera-payload $(DIST)/infera-lint
	cd $(DIST) && sha256sum $(RELEASE_FILES) > SHA256SUMS
	@cat $(DIST)/SHA256SUMS; $(DIST)/infera-exec --version

# make release twice from this tree, the second with an empty Go build
# cache, and compare every byte. VERSION: the newest of CHANGELOG.md.
CHECK_VERSION = $(shell sed -n 's/^## \(v[0-9][^ ]*\).*/\1/p' CHANGELOG.md | head -1)
release-check:
	@rm -rf build/release-a build/release-b build/release-gocache
	$(MAKE) --no-print-directory release VERSION=$(CHECK_VERSION) DIST=build/release-a
	GOCACHE=$(CURDIR)/build/release-gocache $(MAKE) --no-print-directory release VERSION=$(CHECK_VERSION) DIST=build/release-b
	@rm -rf build/release-gocache
	diff -r build/release-a build/release-b
	@echo "make release $(CHECK_VERSION) is reproducible: $$(cd build/release-a && ls | wc -l) files, the same bytes twice"

# The main module, the tools module, then the Kubernetes examples' checks
# and infera-lint (deploy/k8s, a module of its own, so k8s.io/api never
# enters the shim's build; the examples deploy/k8s/*.yaml sit in that
# module's root, so go test's cache sees their edits even without
# -count=1).
# testsummary prints go test's package lines and failed tests' output, and
# at the end every group of skipped tests with the command that enables
# it, then "N passed, N failed, N skipped". The exit status is go test's.
SUMMARY   := build/testsummary
SUMSTATE  := build/test-summary.json
test: build
	@mkdir -p build && rm -f $(SUMSTATE)
	CGO_ENABLED=0 $(GO) build -o $(SUMMARY) ./internal/testsupport/testsummary
	@st=0; \
	echo "INFERA_EXEC_BIN=$(CURDIR)/$(BIN) $(GO) test -short -count=1 ./..."; \
	{ INFERA_EXEC_BIN=$(CURDIR)/$(BIN) $(GO) test -short -json -count=1 ./... 2>&1; echo "$$?" > build/test-status; } | $(SUMMARY) -state $(SUMSTATE) || st=1; \
	[ "$$(cat build/test-status)" = 0 ] || st=1; \
	echo "cd tools && $(GO) test -short -count=1 ./..."; \
	{ cd tools && INFERA_EXEC_BIN=$(CURDIR)/$(BIN) $(GO) test -short -json -count=1 ./... 2>&1; echo "$$?" > $(CURDIR)/build/test-status; } | $(SUMMARY) -state $(SUMSTATE) || st=1; \
	[ "$$(cat build/test-status)" = 0 ] || st=1; \
	echo "cd deploy/k8s && $(GO) test -count=1 ./..."; \
	{ cd deploy/k8s && $(GO) test -json -count=1 ./... 2>&1; echo "$$?" > $(CURDIR)/build/test-status; } | $(SUMMARY) -state $(SUMSTATE) || st=1; \
	[ "$$(cat build/test-status)" = 0 ] || st=1; \
	$(SUMMARY) -state $(SUMSTATE) -final; \
	exit $$st

# What make test samples, in full: every kill -9 and race loop at its
# whole length (go test without -short: testsupport.Rounds), every case
# of the deployment corpus (make test runs a third), the import resolver
# against the real interpreter over 400 generated layouts (make test: 30), then each
# fuzz target for FUZZTIME_LONG inputs beyond its seed corpus. About 5
# minutes on 2 cores; .ci/run runs it after make test.
FUZZTIME_LONG ?= 2000x
test-long: build
	INFERA_EXEC_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -run 'Kill|Crash|TwoStarts|Hostile|Concurrent' ./patches/ ./libionic/ ./overlay/
	INFERA_EXEC_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -run '^TestCorpus$$' ./cmd/infera-exec/
	$(GO) test -count=1 -run '^TestResolverAgreesWithTheInterpreter$$' ./internal/pyimport/
	$(MAKE) fuzz FUZZTIME=$(FUZZTIME_LONG)

# The container recipe (deploy/containers/run.sh) in a real OCI runtime:
# podman with runc, rootful, daemonless, in a podman storage of the test's
# own. The overlay image of `make overlay-image` (the demo payload) is
# loaded with podman load; an engine image with this machine's Debian
# python3, a fake ROCm 7 and a vLLM install with pending fixes is imported
# without a registry. Needs root, podman and runc (and catatonit for
# podman --init); skipped without them, except with CI=true or
# INFERA_REQUIRE_RUNTIME=1 (.ci/run), where that fails. `make test` skips
# these; docs/containers.md says what each story checks.
test-runtime: overlay-image
	INFERA_RUNTIME_TESTS=1 INFERA_OVERLAY_ARCHIVE=$(CURDIR)/$(ARCHIVE) $(GO) test -count=1 -timeout 15m -run '^TestRuntime$$' ./deploy/containers

# Start-up cost, side by side in one run (see BenchmarkStart): the worker
# alone, the floor (a static Go execve), infera-exec restart and first
# start on a real-sized vLLM install, and a Kubernetes restart (overlayfs
# mount with a new upper layer each run; state directory kept, or not):
# needs root and overlayfs. Then --install beside `cp -a && sync` on a
# generated 1 GB payload (see BenchmarkInstall; about 4 GB in a temporary
# directory, removed after). Then `infera-payload image` on a generated
# payload of 320 MB, wall and CPU time (see BenchmarkImage). Benchmarks
# never run in `make test`.
bench: build
	INFERA_EXEC_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -run '^$$' -bench '^Benchmark(Start|Install)$$' -benchtime 1x -timeout 30m ./cmd/infera-exec
	cd tools && INFERA_EXEC_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -run '^$$' -bench '^BenchmarkImage$$' -benchtime 1x ./ociimage

# Every fuzz target for FUZZTIME each (go test runs only their seed corpus).
# A count (Nx), not a duration: with a duration, Go 1.26's fuzzing
# coordinator can report its own stop deadline as a failure
# ("context deadline exceeded", golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 500000x
fuzz:
	@for mod in $(MODULES); do \
	  for pkg in $$(cd $$mod && $(GO) list -f '{{.Dir}}' ./...); do \
	    for f in $$(grep -hs '^func Fuzz' $$pkg/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	      echo "== $$pkg $$f"; (cd $$pkg && $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) .) || exit 1; \
	    done; \
	  done; \
	done

# go vet and staticcheck over every module (deploy/k8s included);
# staticcheck comes from the Go module proxy at a fixed version.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
vet:
	@for mod in $(MODULES) deploy/k8s; do echo "== vet $$mod"; (cd $$mod && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...) || exit 1; done

clean:
	rm -rf bin build

FORCE:
