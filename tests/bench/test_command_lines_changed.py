"""``bench/command/lines_changed.py`` (issue 38): each example's lines changed from its
framework-only version, rebuilt from the example's ``orch`` marks (diff only here: running the
rebuilt scripts is the benchmark's). A line added for ``orch`` without its mark would still be
counted (it uses a name imported from ``workers``); one that slips past both shows up here as a
framework version that still names ``workers``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_each_example_changes_the_lines_the_user_guide_says() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "command" / "lines_changed.py"), "--no-run"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
    ).stdout
    rows = {
        cells[0]: (int(cells[1]), int(cells[2]))
        for line in out.splitlines()
        if line.startswith("| ")
        and (cells := [c.strip() for c in line.strip("|").split("|")])
        and cells[1].isdigit()
    }
    # docs/user-guide.md: 0 for torchrun, 2 for the plain loop, 3 for the Trainer, 3 (+1 for a
    # tokens/s floor's seq_len) for Lightning
    assert rows == {
        "torchrun_script": (0, 0),
        "prepared_loop": (2, 0),
        "hf_causal_lm": (3, 1),
        "lightning_module": (4, 2),
    }, out
