# spdl-go developer entry points. `make demo` and `make test` install what
# they need (Python packages from PyPI, Go modules from the proxy).
PY ?= python3
GO ?= go
LIB := python/spdl_go/libspdl.so
export CGO_ENABLED := 1

# The interpreters the wheel's test suite runs on (.ci/test-python): the
# standard ones (python3, or pyenv's), Debian sid's 3.14 and 3.15 (in a sid
# root, .ci/sidroot), and free-threaded 3.13t. 3.14t and 3.15t
# (.ci/python-ft 3.14 / 3.15) wait for Debian to serve sid's python3.14 and
# python3.15 source files, which 404 today.
PYTHONS ?= 3.10 3.11 3.12 3.13 3.14 3.15 3.13t
# Interpreters tested without torch (5 GB each on a fresh machine): torch's
# tests run on the oldest and the newest, and on the free-threaded one.
NO_TORCH ?= 3.12 3.13
# Free-threaded CPython (GIL disabled), built once per machine by
# .ci/python-ft into a cache outside the checkout: the reliability probes
# and the free-threading benchmark run on it.
FT_VERSION ?= 3.13
FT_PREFIX ?= $(HOME)/.cache/spdl-go/cpython-$(FT_VERSION)t
PYFT := $(FT_PREFIX)/bin/python$(FT_VERSION)t
# The manylinux wheel `make wheel` builds (.ci/wheel), which CI tests.
WHEEL = $(lastword $(sort $(wildcard $(CURDIR)/dist/spdl_go-*-manylinux_*.whl)))
# What `make install` and `make install-ft` install: the checkout (a source
# build) unless told otherwise, e.g. INSTALL_FROM=$(WHEEL).
INSTALL_FROM ?= .

.PHONY: all deps build setup servers install demo test lint go-test fuzz py-test py-test-dev setup-ft install-ft py-test-ft test-ft bench bench-ft bench-media gpu-bundle gpu-check cudatest-lib clean reliability reliability-short fuzz-long wheel bare-root sdist-check py-matrix

all: build

## deps: system packages (apt): gcc, FFmpeg dev files, libturbojpeg, ffmpeg CLI
deps:
	.ci/deps

# Every build of libspdl.so exports only what capi/spdl.h declares: the
# linker version script capi/libspdl.map (python/tests/test_abi.py checks).
LIB_LDFLAGS := -ldflags=-extldflags=-Wl,--version-script=$(CURDIR)/capi/libspdl.map

## build: libspdl.so in place, for development (PYTHONPATH=python)
build: deps
	$(GO) build -buildmode=c-shared $(LIB_LDFLAGS) -o $(LIB) ./capi
	rm -f python/spdl_go/libspdl.h

## setup: system packages, and the Python packages the tests and the demo use
# (torch is large: pip's cache serves it after the first install on a machine)
setup: deps
	$(PY) -m pip install -q --disable-pip-version-check "numpy>=1.26" "pyarrow>=14" "pytest>=7" pytest-timeout pillow torch requests

## install: build the wheel from source and install it (INSTALL_FROM= a wheel instead)
install:
	$(PY) -m pip install -q --disable-pip-version-check --force-reinstall --no-deps $(INSTALL_FROM)

## wheel: the self-contained manylinux_2_31 wheel in dist/ (.ci/wheel):
## libspdl.so built in a Debian 11 root (.ci/buildroot) against FFmpeg 5.1,
## libjpeg-turbo and dav1d built from Debian's sources (.ci/media-libs), all
## cached in ~/.cache/spdl-go; about 5 minutes once per machine, then about
## 20 s. Needs root (chroot)
wheel:
	.ci/wheel

## bare-root: the wheel in a Debian root with nothing but python3 (.ci/bare-root-test):
## a smoke suite, and no library resolving outside the wheel
bare-root:
	.ci/bare-root-test $(WHEEL)

## sdist-check: the sdist builds from source with Go, and says what is missing without
sdist-check: deps
	.ci/sdist-check $(PY)

## py-matrix: the Python suite against the wheel on each of $(PYTHONS) (the
## free-threaded ones with the GIL off); py-test-VERSION runs one
py-matrix: cudatest-lib
	@failed=""; for v in $(PYTHONS); do \
	  SPDL_GO_NO_TORCH="$(NO_TORCH)" SPDL_GO_CUDATEST_LIB=$(CUDATEST_LIB) .ci/test-python $$v "$(WHEEL)" || failed="$$failed $$v"; \
	done; \
	if [ -n "$$failed" ]; then echo "py-matrix: failed on$$failed"; exit 1; fi

py-test-%: cudatest-lib
	SPDL_GO_NO_TORCH="$(NO_TORCH)" SPDL_GO_CUDATEST_LIB=$(CUDATEST_LIB) .ci/test-python $* "$(WHEEL)"

## demo: trains a small CNN on a generated JPEG folder (a few broken files) fed by
## spdl-go and by torch's DataLoader: images/s and their ratio, loss, the stats
## table with its bottleneck, the failures (about 1 min on 2 cores; 30 s once cached)
demo: setup install
	cd /tmp && $(PY) -m spdl_go.demo

## servers: nginx and versitygw, which the remote-read tests start on loopback
servers:
	.ci/servers

## test: the lint and type gates, Go tests with the race detector, the
## manylinux wheel and its bare-system smoke test, the sdist's source build,
## then pytest against the wheel on each of $(PYTHONS); prints how long each
## step took
TEST_STEPS := setup servers lint go-test wheel bare-root sdist-check py-matrix
test:
	@for step in $(TEST_STEPS); do \
	  start=$$(date +%s); \
	  $(MAKE) --no-print-directory $$step || exit 1; \
	  echo "== make $$step: $$(( $$(date +%s) - start )) s"; \
	done

## lint: go vet, staticcheck, ruff (check, format --check) and mypy, each
## configured in the repository (staticcheck.conf, ruff.toml, mypy.ini)
STATICCHECK_VERSION := 0.8.2
LINT_PIP := ruff==0.17.6 mypy==2.4.1
STATICCHECK = $(shell $(GO) env GOPATH)/bin/staticcheck
lint: setup
	$(PY) -m pip install -q --disable-pip-version-check $(LINT_PIP)
	@$(STATICCHECK) -version 2>/dev/null | grep -qF "($(STATICCHECK_VERSION))" || \
	  (cd /tmp && GOFLAGS=-mod=mod $(GO) install honnef.co/go/tools/cmd/staticcheck@v$(STATICCHECK_VERSION))
	$(GO) vet ./...
	$(GO) vet -tags cudatest ./capi/... ./core/cuda/...
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags cudatest ./capi/... ./core/cuda/...
	$(PY) -m ruff check python benchmarks setup.py .ci/wheel_smoke.py
	$(PY) -m ruff format --check python benchmarks setup.py .ci/wheel_smoke.py
	$(PY) -m mypy

go-test:
	$(GO) test -race -count=1 ./...
	$(MAKE) fuzz

## fuzz: each decoder's fuzz target on corrupt bytes, for a number of
## executions (about 20 s each here). Counts, not durations: Go 1.26's
## fuzz coordinator can fail a duration-limited run with "context deadline
## exceeded" at the deadline (golang/go#75804).
FUZZ_TARGETS := ./core/wire:FuzzDecode:200000x ./core/media/img:FuzzDecodeImage:30000x \
	./core/media/audio:FuzzDecodeAudio:30000x ./core/media/video:FuzzDecodeVideo:8000x \
	./core/sampler:FuzzResume:20000x ./core/sources:FuzzTarShard:20000x \
	./core/sources:FuzzTableFile:20000x ./core/formats:FuzzNpy:100000x \
	./core/formats:FuzzNpz:100000x ./core/formats:FuzzWAV:100000x ./core/formats:FuzzTar:100000x \
	./core/tensor:FuzzSharedDescriptor:100000x ./core/wire:FuzzReadFrame:100000x
fuzz:
	@for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$${rest##*:}; \
	  echo "fuzz $$name ($$pkg) for $$n"; \
	  $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $$n -fuzzminimizetime 50x $$pkg || exit 1; \
	done

## fuzz-long: each fuzz target for FUZZ_LONG (default 5m) on a developer
## machine: before a decoder or parser change lands (not in CI). A run that
## only ends in "context deadline exceeded" at its deadline passes
## (golang/go#75804); any failing input fails it and is kept in testdata.
FUZZ_LONG ?= 5m
fuzz-long:
	@for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; \
	  echo "fuzz $$name ($$pkg) for $(FUZZ_LONG)"; \
	  out=$$($(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZ_LONG) $$pkg 2>&1); rc=$$?; \
	  echo "$$out" | grep -E "^fuzz: elapsed" | tail -1; echo "$$out" | tail -2; \
	  if [ $$rc -ne 0 ]; then \
	    if echo "$$out" | grep -q "Failing input written" || ! echo "$$out" | grep -q "context deadline exceeded"; then \
	      echo "$$out" | tail -30; exit 1; \
	    fi; \
	  fi; \
	done

## test-ft: the Python test suite on free-threaded CPython $(FT_VERSION)t, GIL off,
## against a source build (builds the interpreter once per machine: about 8 minutes)
test-ft: setup-ft install-ft py-test-ft

setup-ft: deps
	.ci/python-ft $(FT_VERSION) $(FT_PREFIX)
	.ci/python-deps $(PYFT)

install-ft:
	$(PYFT) -m pip install -q --disable-pip-version-check --force-reinstall --no-deps $(INSTALL_FROM)

# PYTHON_GIL=0 keeps the GIL off even if an extension module was not built
# for free-threading (CPython would otherwise turn it back on, with a warning).
py-test-ft:
	cd /tmp && SPDL_GO_CUDATEST_LIB=$(CUDATEST_LIB) PYTHON_GIL=0 $(PYFT) -m pytest -q -p no:cacheprovider $(CURDIR)/python/tests

# Runs from outside the checkout so that the installed package is imported.
py-test: cudatest-lib
	cd /tmp && SPDL_GO_CUDATEST_LIB=$(CUDATEST_LIB) $(PY) -m pytest -q -p no:cacheprovider $(CURDIR)/python/tests

## cudatest-lib: a libspdl whose CUDA runtime can be the host-memory stand-in
## (core/cuda/cudatest), for the Python tests of CUDA tensors without a GPU
CUDATEST_LIB := $(CURDIR)/build/cudatest/libspdl.so
cudatest-lib: deps
	$(GO) build -tags cudatest -buildmode=c-shared $(LIB_LDFLAGS) -o $(CUDATEST_LIB) ./capi
	rm -f $(CURDIR)/build/cudatest/libspdl.h

py-test-dev: build
	PYTHONPATH=python $(PY) -m pytest -q python/tests

BENCH_PIP = "spdl==0.8.0" nvidia-dali-cuda120 tqdm matplotlib soundfile av

## bench: engine overhead per item and per batch; image pipeline vs decode-only
## limit; side by side with torch DataLoader and SPDL (results in benchmarks/results/).
## bench and bench-media measure the release wheel, what `pip install` gives users:
## its minimal FFmpeg loads in 20 ms where a source build's link to the system's
## full FFmpeg (200+ libraries) takes 90 ms, and probes fewer formats per file
bench: setup wheel
	$(MAKE) install INSTALL_FROM=$(WHEEL)
	$(PY) -m pip install -q --disable-pip-version-check $(BENCH_PIP)
	cd /tmp && $(PY) $(CURDIR)/benchmarks/bench_overhead.py
	cd /tmp && $(PY) $(CURDIR)/benchmarks/bench_image.py --json $(CURDIR)/benchmarks/results/image.json
	cd /tmp && $(PY) $(CURDIR)/benchmarks/bench_compare.py --json $(CURDIR)/benchmarks/results/compare.json

## bench-ft: Python-stage scaling and overhead on $(PY) and on $(FT_VERSION)t (GIL off)
bench-ft: setup install setup-ft install-ft
	cd /tmp && $(PY) $(CURDIR)/benchmarks/bench_freethreading.py --json $(CURDIR)/benchmarks/results/freethreading-$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])').json
	cd /tmp && PYTHON_GIL=0 $(PYFT) $(CURDIR)/benchmarks/bench_freethreading.py --json $(CURDIR)/benchmarks/results/freethreading-$(FT_VERSION)t.json

## bench-media: audio, video and large mixed images side by side with their anchors
bench-media: setup wheel
	$(MAKE) install INSTALL_FROM=$(WHEEL)
	$(PY) -m pip install -q --disable-pip-version-check $(BENCH_PIP)
	cd /tmp && $(PY) $(CURDIR)/benchmarks/bench_audio.py --json $(CURDIR)/benchmarks/results/audio.json
	cd /tmp && $(PY) $(CURDIR)/benchmarks/bench_video.py --json $(CURDIR)/benchmarks/results/video.json
	cd /tmp && $(PY) $(CURDIR)/benchmarks/bench_large_images.py --json $(CURDIR)/benchmarks/results/large_images.json

## gpu-bundle: .gpu/libspdl.so without FFmpeg or libjpeg (it needs only libc), to carry
## to a GPU machine that has PyTorch but not Debian's media libraries
gpu-bundle: deps
	$(GO) build -tags nomedia -buildmode=c-shared $(LIB_LDFLAGS) -o .gpu/libspdl.so ./capi
	rm -f .gpu/libspdl.h

## gpu-check: to_device's GPU checks (benchmarks/gpu_check.py); exits 2 without a GPU
gpu-check: gpu-bundle
	SPDL_GO_LIBRARY=$(CURDIR)/.gpu/libspdl.so PYTHONPATH=$(CURDIR)/python $(PY) benchmarks/gpu_check.py --out benchmarks/results/gpu_check.json

clean:
	rm -rf build dist .gpu python/*.egg-info $(LIB) python/spdl_go/libspdl.h

## reliability: the probes of benchmarks/reliability/ (soak, build/stop cycles,
## corrupt inputs, a fault-injecting server, cache SIGKILLs, signals and exit)
## against the installed wheel on $(PY) and on $(FT_VERSION)t (GIL off), at most about
## 15 minutes each; fails on any crash, hang, leak, unnamed error or wrong byte.
## reliability-short: the same, about 3 minutes each (what CI runs)
RELIABILITY = $(CURDIR)/benchmarks/reliability/run.py
reliability reliability-short: setup install setup-ft install-ft
	@mode=$(if $(filter reliability-short,$@),--short,--full); st=0; mkdir -p $(CURDIR)/build; \
	(cd /tmp && $(PY) $(RELIABILITY) $$mode --json $(CURDIR)/build/$@-gil.json) || st=1; \
	(cd /tmp && PYTHON_GIL=0 $(PYFT) $(RELIABILITY) $$mode --json $(CURDIR)/build/$@-ft.json) || st=1; \
	exit $$st
