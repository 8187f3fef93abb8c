"""What the step hook (workers.launch, issue 38) costs a script that never calls job.report:
a 16->1 linear step (forward, backward, SGD step) timed bare and with the hook installed,
its reports going to /dev/null as to the worker's pipe. One process per mode, 2,000 warm-up
steps, then 7 rounds of 5,000; min and median microseconds per step.

    python bench/command/step_hook_overhead.py bare
    python bench/command/step_hook_overhead.py hook
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

folder = tempfile.mkdtemp()
with open(os.path.join(folder, "context.json"), "w") as fh:
    json.dump({"micro_batch": 32}, fh)
os.environ["ORCH_JOB_CONTEXT"] = os.path.join(folder, "context.json")
os.environ["ORCH_JOB_FD"] = str(os.open(os.devnull, os.O_WRONLY))

import torch  # noqa: E402

torch.set_num_threads(1)
mode = sys.argv[1] if len(sys.argv) > 1 else "hook"
if mode == "hook":
    from workers.launch import install_step_hook

    install_step_hook()
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 16), torch.randn(32, 1)


def step() -> None:
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()


for _ in range(2000):
    step()
rounds = []
for _ in range(7):
    t = time.perf_counter()
    for _ in range(5000):
        step()
    rounds.append((time.perf_counter() - t) / 5000 * 1e6)
print(f"{mode}: {min(rounds):.1f} us/step min, {sorted(rounds)[3]:.1f} median")
