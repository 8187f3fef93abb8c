"""Lines each integration's example changed from the framework's own version of the script
(issue 38's benchmark: at most 3; 0 for torchrun), counted by ``diff``.

The framework's own version is made from the example by undoing its ``orch`` lines: a line
``CODE  # orch: was ORIGINAL`` becomes ``ORIGINAL`` (at the line's indent); a line marked
``# orch`` (or ``# orch: why``), and a line that uses a name imported from ``workers``, is
dropped. Then the two are diffed, and the framework's version is run on its own (``python``,
or ``torchrun`` for the torchrun script; a few steps), which shows it is the script a team
would have without ``orch``: it must not import ``workers`` and must run.

    .venv/bin/python bench/command/lines_changed.py [--no-run]
"""

from __future__ import annotations

import argparse
import difflib
import io
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {  # each example, and how its framework version runs alone (a few steps)
    "torchrun_script": [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "1",
        "train.py",
        "--steps",
        "3",
    ],
    "prepared_loop": ["train.py"],
    "hf_causal_lm": ["train.py", "--steps", "3", "--lines", "300"],
    "lightning_module": ["train.py", "--steps", "3", "--lines", "300"],
}
MARK = re.compile(r"\s+# orch(?::\s*(?P<note>.*))?$")
IMPORT = re.compile(r"^\s*from workers(?:\.\w+)* import (?P<names>.+?)\s*(?:#.*)?$")


def framework_version(text: str) -> str:
    """``text`` with its ``orch`` lines undone (see the module doc)."""
    names: set[str] = set()
    for line in text.splitlines():
        found = IMPORT.match(line)
        if found:
            names.update(part.split(" as ")[-1].strip() for part in found["names"].split(","))
    uses = _lines_using(text, names)
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        mark = MARK.search(line)
        note = (mark["note"] or "") if mark else ""
        if note.startswith("was "):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + note.removeprefix("was "))
        elif not (mark or IMPORT.match(line) or number in uses):
            out.append(line)
    return "\n".join(out) + "\n"


def _lines_using(text: str, names: set[str]) -> set[int]:
    """The lines whose code (not a string or comment) uses one of ``names``."""
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    return {
        tok.start[0]
        for tok, nxt in itertools.pairwise(tokens)
        if tok.type == tokenize.NAME and tok.string in names and nxt.string == "."
    }


def diff(example: str) -> tuple[str, str, int, int]:
    """The framework's version of the example's script, the unified diff to the example,
    and the lines added and removed."""
    script = ROOT / "examples" / example / "train.py"
    text = script.read_text()
    plain = framework_version(text)
    if "workers" in plain:  # an orch line neither marked nor using orch's names
        raise SystemExit(f"{example}: the framework version still names workers")
    lines = list(
        difflib.unified_diff(
            plain.splitlines(),
            text.splitlines(),
            "framework/train.py",
            "orch/train.py",
            n=0,
            lineterm="",
        )
    )
    body = [line for line in lines if not line.startswith(("---", "+++", "@@"))]
    added = sum(line.startswith("+") for line in body)
    removed = sum(line.startswith("-") for line in body)
    return plain, "\n".join(lines), added, removed


def run_alone(example: str, plain: str) -> str:
    """Run the framework's version on its own, from a copy of the example's folder, with no
    ``workers`` on the path; its last line of output."""
    with tempfile.TemporaryDirectory(prefix="orch-lines-") as tmp:
        folder = Path(tmp) / example
        shutil.copytree(ROOT / "examples" / example, folder)
        (folder / "train.py").write_text(plain)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "PYTHONPATH"))}
        env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
        out = subprocess.run(
            [sys.executable, "-P", *EXAMPLES[example]],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if out.returncode != 0:
            raise SystemExit(f"{example}: the framework version failed:\n{out.stderr[-2000:]}")
        return (out.stdout.strip().splitlines() or [""])[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-run", action="store_true", help="diff only")
    args = parser.parse_args()
    rows = []
    for example in EXAMPLES:
        plain, text, added, removed = diff(example)
        print(f"== {example}: {added} added or changed, {removed} removed")
        print(text or "(no change)")
        ran = "" if args.no_run else run_alone(example, plain)
        rows.append((example, added, removed, ran))
    print("\n| example | lines added or changed | lines removed | framework version alone |")
    print("| --- | ---: | ---: | --- |")
    for example, added, removed, ran in rows:
        print(f"| {example} | {added} | {removed} | {ran or 'not run'} |")


if __name__ == "__main__":
    main()
