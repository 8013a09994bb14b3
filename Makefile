# Two entry points for a fresh machine; each builds its own virtualenv in .venv:
#   make demo   build, install, and decode the bundled sample capture
#   make test   build, install, lint, and run the test suite
# The package (C++ core included, CUDA parts where nvcc is found) is rebuilt by
# `pip install` on every run; the CMake build directory under build/ keeps it incremental.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test install clean

demo: install
	$(BIN)/roce-transceiver info
	@echo
	$(BIN)/roce-transceiver decode --sample

# The pytest script, not `python -m pytest`: -m puts the source tree first on sys.path,
# and its roce_transceiver/ (no built _core) would shadow the installed package.
# pytest exits 5 when it collects no test, which fails this target as it should.
test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest

install: $(BIN)/python
	$(BIN)/python -m pip install ".[test]"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

clean:
	rm -rf $(VENV) build
