# Two commands do all set-up on a fresh machine with Python 3.11 and make:
#   make demo   - create .venv, install, and run the demo on embedded defaults
#   make test   - create .venv, install with dev extras, lint, type-check and run the tests
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit browser sandbox clean

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# torch is pinned and installed first: an unpinned torch would pull the CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[server,dev,hf,lightning]"
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

# The dashboard's browser test drives Debian's chromium through chromedriver: installed here
# when missing and the user is root (else the test skips and says why).
browser:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -qq chromium chromium-driver \
				|| echo "note: could not install chromium: the browser test will skip"; \
		else \
			echo "note: chromium/chromedriver missing and not root: the browser test will skip"; \
		fi; \
	fi

# A team's code runs as an unprivileged uid (workers/sandbox.py), which must be able to run
# this Python: as root, give others search permission (x, never read) on the folders above the
# interpreter and this checkout where they lack it (pyenv under a 0700 /root, say).
sandbox: $(STAMP)
	@bash .ci/open-python.sh $(BIN)/python

test: lint typecheck browser sandbox
	$(BIN)/python -m pytest -q -rs --durations=15 -n 2 --dist load

clean:
	rm -rf $(VENV) .orch-data .pytest_cache .mypy_cache .ruff_cache
