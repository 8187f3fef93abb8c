"""A Hugging Face Trainer script for a small causal LM, under `orch` with three changed lines.

Everything is made here, nothing is downloaded: the text is generated, a word-level tokenizer
is trained on it (`tokenizers`, wrapped in `PreTrainedTokenizerFast`), the dataset is a
`datasets.Dataset` of it, and the model is a 2-layer GPT-2 (d_model 64) from its config, with
random weights. Run it alone with `python train.py`, or submit it from this folder with
`orch submit --working-dir . job.yaml` (a tokens/s floor) or `job-latency.yaml` (a ceiling on
the step time). The lines marked `orch` are what the team changed.
"""

from __future__ import annotations

import argparse
import os
import random

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
    default_data_collator,
)

from workers.integrations import hf  # orch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # this example fetches nothing
SEQ_LEN = 32
SUBJECTS = ["the cat", "a dog", "my model", "the cluster", "our team", "the scheduler"]
VERBS = ["sees", "trains", "waits for", "preempts", "resumes", "measures"]
OBJECTS = ["the gpu", "a batch", "the loss", "every step", "the checkpoint", "a token"]


def corpus(lines: int, seed: int = 0) -> list[str]:
    """Sentences of a small grammar: a model can learn it in a few hundred steps."""
    rng = random.Random(seed)
    return [
        f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} ." for _ in range(lines)
    ]


def tokenizer(text: list[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer trained on ``text`` here (no hub)."""
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(text, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[EOS]"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]")


def blocks(text: list[str], tok: PreTrainedTokenizerFast) -> Dataset:
    """The text as one token stream cut into ``SEQ_LEN`` blocks (labels: the inputs)."""

    def group(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        ids = [i for line in tok(batch["text"])["input_ids"] for i in [*line, tok.eos_token_id]]
        cut = [ids[i : i + SEQ_LEN] for i in range(0, len(ids) - SEQ_LEN + 1, SEQ_LEN)]
        return {"input_ids": cut, "labels": cut}

    return Dataset.from_dict({"text": text}).map(group, batched=True, remove_columns=["text"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lines", type=int, default=4000)
    cli = parser.parse_args()

    text = corpus(cli.lines)
    tok = tokenizer(text)
    data = blocks(text, tok)
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=tok.vocab_size,
        n_positions=SEQ_LEN,
        n_embd=64,
        n_layer=2,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
    )
    model = AutoModelForCausalLM.from_config(config)
    args = TrainingArguments(
        output_dir="out",
        per_device_train_batch_size=16,
        max_steps=cli.steps,
        learning_rate=3e-3,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        seed=0,
    )
    args = hf.training_arguments(args)  # orch
    trainer = Trainer(
        model=model, args=args, train_dataset=data, data_collator=default_data_collator
    )
    hf.train(trainer, seq_len=SEQ_LEN)  # orch: was trainer.train()
    probe = default_data_collator([data[i] for i in range(32)])
    model.eval()
    with torch.no_grad():
        loss = model(**{k: v.to(model.device) for k, v in probe.items()}).loss.item()
    if trainer.is_world_process_zero():
        a = trainer.args
        print(
            f"final loss {loss:.6f} at step {trainer.state.global_step} (batch "
            f"{a.per_device_train_batch_size} x {a.gradient_accumulation_steps}, bf16 {a.bf16})",
            flush=True,
        )


if __name__ == "__main__":
    main()
