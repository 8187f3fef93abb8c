"""A tiny Trainer run that writes what its TrainingArguments hold (tests/workers/
test_integration_hf.py); with ``--crash``, it fails at the third step."""

from __future__ import annotations

import json
import os
import sys

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, GPT2Config, Trainer, TrainerCallback

from workers import job
from workers.integrations import hf


class Crash(TrainerCallback):
    """Fails as a script's own code would, at the third step."""

    def on_step_end(self, args: object, state: object, control: object, **kw: object) -> None:
        if getattr(state, "global_step", 0) == 3:
            raise RuntimeError("shard 7 is corrupt: bad header")


def main() -> None:
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (256, 16), generator=torch.Generator().manual_seed(0)).tolist()
    data = Dataset.from_dict({"input_ids": ids, "labels": ids})
    model = AutoModelForCausalLM.from_config(
        GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    )
    args = hf.training_arguments(
        {"output_dir": "out", "per_device_train_batch_size": 4, "report_to": "none"}
    )
    trainer = Trainer(model=model, args=args, train_dataset=data)
    if "--crash" in sys.argv:
        trainer.add_callback(Crash())
    a = trainer.args
    seen = {
        "per_device_train_batch_size": a.per_device_train_batch_size,
        "gradient_accumulation_steps": a.gradient_accumulation_steps,
        "bf16": a.bf16,
        "fp16": a.fp16,
        "max_steps": a.max_steps,
        "output_dir": a.output_dir,
        "dataloader_num_workers": a.dataloader_num_workers,
        "dataloader_persistent_workers": a.dataloader_persistent_workers,
        "world_size": a.world_size,
        "fsdp_asked": bool(a.fsdp),
        "fsdp": trainer.is_fsdp_enabled,
        "loader_batch": len(next(iter(trainer.get_train_dataloader()))["input_ids"]),
    }
    ctx = job.context()
    with open(os.path.join(ctx.checkpoint_dir, f"probe-{ctx.rank}.json"), "w") as fh:
        json.dump(seen, fh)
    hf.train(trainer, seq_len=16)


if __name__ == "__main__":
    main()
