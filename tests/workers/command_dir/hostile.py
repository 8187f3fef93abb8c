"""A hostile command-mode script: it tries to read what is not its own, then reports once.

Its findings go to its checkpoint folder (its own) and its output, as JSON, for the test."""

import json
import os
import sys
from pathlib import Path

from workers import job

ctx = job.context()
found = {"uid": os.getuid(), "env": sorted(k for k in os.environ if not k.startswith("ORCH_JOB"))}
for probe, path in json.loads(sys.argv[1]).items():
    try:
        if Path(path).is_dir():
            os.listdir(path)
        else:
            Path(path).read_bytes()
        found[probe] = "read"
    except OSError as err:
        found[probe] = f"refused:{type(err).__name__}"
Path(ctx.checkpoint_dir, "found.json").write_text(json.dumps(found))
print("HOSTILE " + json.dumps(found), flush=True)
job.report(samples=1, loss=0.0)
