"""What the harness imports: what every worker, sandboxed child and service relaunch pays for
before its run starts (a relaunched service answers nothing meanwhile)."""

from __future__ import annotations

import subprocess
import sys


def test_the_harness_does_not_import_torch_dynamo() -> None:
    # torch._dynamo comes with torch.distributed.pipelining (about half of the harness's import
    # time); only a run with pipeline stages needs it, and imports it when it builds them
    probe = "import sys, workers.harness; print('torch._dynamo' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split()[-1] == "False"
