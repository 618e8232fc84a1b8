# spdl-go developer entry points. `make demo` and `make test` install what
# they need (Python packages from PyPI, Go modules from the proxy).
PY ?= python3
GO ?= go
LIB := python/spdl_go/libspdl.so
export CGO_ENABLED := 1

.PHONY: all build setup install demo test go-test py-test py-test-dev bench clean

all: build

## build: libspdl.so in place, for development (PYTHONPATH=python)
build:
	$(GO) build -buildmode=c-shared -o $(LIB) ./capi
	rm -f python/spdl_go/libspdl.h

## setup: Python packages the tests and the demo use
setup:
	$(PY) -m pip install -q --disable-pip-version-check "numpy>=1.26" "pyarrow>=14" "pytest>=7" pytest-timeout

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

# Runs from outside the checkout so that the installed package is imported.
py-test:
	cd /tmp && $(PY) -m pytest -q -p no:cacheprovider $(CURDIR)/python/tests

py-test-dev: build
	PYTHONPATH=python $(PY) -m pytest -q python/tests

## bench: engine overhead per item and per-batch handoff cost
bench: setup install
	cd /tmp && $(PY) $(CURDIR)/benchmarks/bench_overhead.py

clean:
	rm -rf build dist python/*.egg-info $(LIB) python/spdl_go/libspdl.h
