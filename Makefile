# Two commands do all set-up on a fresh machine with Python 3.11 and make:
#   make demo   - create .venv, install, and run the demo on embedded defaults
#   make test   - create .venv, install with dev extras, lint, type-check and run the tests
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit clean

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# torch is pinned and installed first: an unpinned torch would pull the CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/orch demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

test: lint typecheck
	$(BIN)/python -m pytest -q -rs --durations=15

clean:
	rm -rf $(VENV) .orch-data .pytest_cache .mypy_cache .ruff_cache
