# spdl-go developer entry points. `make demo` and `make test` install what
# they need (Python packages from PyPI, Go modules from the proxy).
PY ?= python3
GO ?= go
LIB := python/spdl_go/libspdl.so
export CGO_ENABLED := 1

.PHONY: all deps build setup install demo test go-test fuzz py-test py-test-dev bench bench-media clean

all: build

## deps: system packages (apt): gcc, FFmpeg dev files, libturbojpeg, ffmpeg CLI
deps:
	.ci/deps

## build: libspdl.so in place, for development (PYTHONPATH=python)
build: deps
	$(GO) build -buildmode=c-shared -o $(LIB) ./capi
	rm -f python/spdl_go/libspdl.h

## setup: system packages, and the Python packages the tests and the demo use
# (torch is large: pip's cache serves it after the first install on a machine)
setup: deps
	$(PY) -m pip install -q --disable-pip-version-check "numpy>=1.26" "pyarrow>=14" "pytest>=7" pytest-timeout pillow torch

## install: build the wheel and install it (what users get from pip)
install:
	$(PY) -m pip install -q --disable-pip-version-check --force-reinstall --no-deps .

## demo: a training-style loop over generated data, printing throughput and stats
demo: setup install
	cd /tmp && $(PY) -m spdl_go.demo

## test: Go tests with the race detector, then pytest against the installed wheel
test: setup go-test install py-test

go-test:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	$(MAKE) fuzz

## fuzz: each decoder's fuzz target on corrupt bytes, for a number of
## executions (about 20 s each here). Counts, not durations: Go 1.26's
## fuzz coordinator can fail a duration-limited run with "context deadline
## exceeded" at the deadline (golang/go#75804).
FUZZ_TARGETS := ./core/wire:FuzzDecode:200000x ./core/media/img:FuzzDecodeImage:30000x \
	./core/media/audio:FuzzDecodeAudio:30000x ./core/media/video:FuzzDecodeVideo:8000x
fuzz:
	@for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$${rest##*:}; \
	  echo "fuzz $$name ($$pkg) for $$n"; \
	  $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $$n -fuzzminimizetime 50x $$pkg || exit 1; \
	done

# Runs from outside the checkout so that the installed package is imported.
py-test:
	cd /tmp && $(PY) -m pytest -q -p no:cacheprovider $(CURDIR)/python/tests

py-test-dev: build
	PYTHONPATH=python $(PY) -m pytest -q python/tests

BENCH_PIP = "spdl==0.8.0" tqdm matplotlib soundfile

## bench: engine overhead per item and per batch; image pipeline vs decode-only
## limit; side by side with torch DataLoader and SPDL (results in benchmarks/results/)
bench: setup install
	$(PY) -m pip install -q --disable-pip-version-check $(BENCH_PIP)
	cd /tmp && $(PY) $(CURDIR)/benchmarks/bench_overhead.py
	cd /tmp && $(PY) $(CURDIR)/benchmarks/bench_image.py --json $(CURDIR)/benchmarks/results/image.json
	cd /tmp && $(PY) $(CURDIR)/benchmarks/bench_compare.py --json $(CURDIR)/benchmarks/results/compare.json

## bench-media: audio and video side by side with their anchors
bench-media: setup install
	$(PY) -m pip install -q --disable-pip-version-check $(BENCH_PIP)
	cd /tmp && $(PY) $(CURDIR)/benchmarks/bench_audio.py --json $(CURDIR)/benchmarks/results/audio.json
	cd /tmp && $(PY) $(CURDIR)/benchmarks/bench_video.py --json $(CURDIR)/benchmarks/results/video.json

clean:
	rm -rf build dist python/*.egg-info $(LIB) python/spdl_go/libspdl.h
