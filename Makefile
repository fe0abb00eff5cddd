# Two entry points: `make demo` runs the quickstart job, `make test` runs the tests.
# Both create .venv with the first python3 >= 3.10 found (override with PYTHON=...) and install raylc into it.
PYTHON ?= $(shell for p in python3 python3.13 python3.12 python3.11 python3.10; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null && { echo $$p; break; }; done)
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test install install-test clean

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "error: need Python >= 3.10 on PATH (or PYTHON=...)" >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[test]"
	@touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

demo: install
	$(BIN)/raylc run jobs/quickstart.yaml

# The fast suite in parallel (pytest-xdist, one worker per core), then the tests that start Ray
# in one process (one shared Ray instance; Ray's own workers need the cores).
test: install-test
	$(BIN)/python -m pytest -q -m "not ray" --durations=10
	$(BIN)/python -m pytest -q -m ray -n 0 --durations=15

clean:
	rm -rf $(VENV) runs .pytest_cache
