"""What the Hugging Face callback (workers/integrations/hf.py, issue 38) adds to a Trainer step,
timed in one process: ``OrchCallback.on_step_end`` (a step report, the stop poll, the
checkpoint question and the stop agreed over the ranks) called as the Trainer calls it after
each optimizer step, its reports going to /dev/null as to the worker's pipe, under a one-rank
Gloo group (what Accelerate starts under orch's torchrun variables, so the agreement is a real
all-reduce). 2,000 warm-up calls, then 7 rounds of 5,000; min and median microseconds per
call. The end-to-end comparison (bench/command/integration_cost.py) is the same question
asked of whole runs, where the machine's noise is far larger than this.

    .venv/bin/python bench/command/hf_callback_overhead.py
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from types import SimpleNamespace

folder = tempfile.mkdtemp()
with open(os.path.join(folder, "context.json"), "w") as fh:
    json.dump({"micro_batch": 16, "checkpoint_dir": folder}, fh)
os.environ["ORCH_JOB_CONTEXT"] = os.path.join(folder, "context.json")
os.environ["ORCH_JOB_FD"] = str(os.open(os.devnull, os.O_WRONLY))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from workers.integrations.hf import OrchCallback  # noqa: E402

torch.set_num_threads(1)
with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
callback = OrchCallback(seq_len=32)
args = SimpleNamespace(
    per_device_train_batch_size=16,
    gradient_accumulation_steps=1,
    world_size=1,
    device=torch.device("cpu"),
)
state = SimpleNamespace(global_step=0, num_input_tokens_seen=0)
control = SimpleNamespace(should_save=False, should_training_stop=False)
callback.on_train_begin(args, state, control)


def step() -> None:
    state.global_step += 1
    callback.on_step_end(args, state, control)


for _ in range(2000):
    step()
rounds = []
for _ in range(7):
    t = time.perf_counter()
    for _ in range(5000):
        step()
    rounds.append((time.perf_counter() - t) / 5000 * 1e6)
assert not control.should_save and not control.should_training_stop
print(f"on_step_end: {min(rounds):.1f} us/step min, {sorted(rounds)[3]:.1f} median")
dist.destroy_process_group()
