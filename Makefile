# Two entry points for a fresh machine; each builds its own virtualenv in .venv:
#   make demo   build, install, and run the round-trip latency app (Holoscan) on the
#               embedded default: the in-memory far end, no network needed
#   make test   build, install, lint, and run the test suite
# The package (C++ core included) is rebuilt by `pip install` on every run; the CMake build
# directory under build/ keeps it incremental. Its CUDA parts are built only where a GPU can
# run them (`nvidia-smi -L` finds one) or where the caller asks (RT_CUDA=ON, as .ci/run sets
# where nvcc is found, so that CI compiles them): compiling them takes minutes (254 s against
# 108 s for the whole build on a 2-core machine) that a demo or test run without a GPU cannot
# use. RT_CUDA=ON|OFF|AUTO from the environment or `make RT_CUDA=...` wins.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RT_CUDA ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo ON || echo OFF)
CXX_SOURCES := $(shell find roce_transceiver/core tests/cpp -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh')

.PHONY: demo test install format clean

demo: install
	$(BIN)/roce-transceiver info
	@echo
	ulimit -s 32768; $(BIN)/python apps/roundtrip_latency.py --output-dir build/demo

# The pytest script, not `python -m pytest`: -m puts the source tree first on sys.path,
# and its roce_transceiver/ (no built _core) would shadow the installed package.
# pytest exits 5 when it collects no test, which fails this target as it should.
test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@if command -v clang-format >/dev/null; then \
	  clang-format --dry-run --Werror $(CXX_SOURCES) && echo "clang-format: clean"; \
	else echo "clang-format not found: C++ format check skipped (apt-get install clang-format)"; fi
	$(BIN)/pytest

install: $(BIN)/python
	RT_CUDA=$(RT_CUDA) $(BIN)/python -m pip install ".[test]"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

format:
	clang-format -i $(CXX_SOURCES)
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) build
