"""GPU kinds: what a node's GPUs are called in the pool, and how fast each kind is.

A node's kind comes, first found, from:

1. the Ray resource ``orch_gpu_kind:NAME`` the node declares (``ray start --num-gpus 4
   --resources '{"orch_gpu_kind:L4": 4}'``): how an operator labels virtual slots (so the tests
   run several kinds on one CPU machine) or names real GPUs their own way;
2. NVML's model name on real GPUs, shortened to the catalogue's name (``NVIDIA H100 80GB HBM3``
   -> ``H100``; a model not in the catalogue keeps its name, spaces as dashes);
3. Ray's own ``accelerator_type:NAME`` resource (Ray sets it from the driver on GPU nodes);
4. ``virtual`` for CPU-backed slots that declare nothing.

A kind's **speed** is its relative speed per GPU (an A100 is 1.0): the node's declared Ray
resource ``orch_gpu_speed_pct`` in percent (``40`` is 0.4: Ray takes whole numbers for a node's
resources; a label, nothing asks for it), else the catalogue's, else 1.0. It is
a prior, what a job is assumed to get on the kind until the job has been measured there
(``orchestrator.tuner.kinds``); for the policies it is also the kind's cost (a faster kind is a
dearer one, see ``policies.eligibility``). The catalogue's speeds are the makers' dense
bf16/fp16 tensor figures relative to the A100's 312 TFLOP/s (their data sheets); a workload
bound by memory bandwidth or communication gains less, which per-job measurement corrects.

Why hand-written: Ray names the accelerator (``accelerator_type``) but knows no relative speed
and no name for virtual slots; NVML names the model in the maker's long form.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.names import ruled

KIND_RESOURCE = "orch_gpu_kind:"
"""Prefix of the Ray resource by which a node declares its GPUs' kind (a label)."""
SPEED_RESOURCE = "orch_gpu_speed_pct"
"""The Ray resource by which a node declares its kind's speed per GPU, in percent (a label)."""
RAY_ACCELERATOR = "accelerator_type:"
VIRTUAL = "virtual"
"""The kind of CPU-backed slots that declare none."""

KIND_NAME = ruled(
    r"^[A-Za-z0-9._-]{1,64}$", "must be a GPU kind's name: 1-64 letters, digits, '.', '_' or '-'"
)
"""What a kind's name may be (job files' ``resources.gpu_kinds`` are held to it)."""

# name: (speed per GPU against an A100, the model names' patterns), most specific first
CATALOGUE: tuple[tuple[str, float, str], ...] = (
    ("GH200", 3.17, r"GH200"),
    ("H200", 3.17, r"H200"),
    ("H100", 3.17, r"H100|H800"),
    ("B200", 7.21, r"B200"),
    ("A100", 1.0, r"A100|A800"),
    ("L40S", 1.17, r"L40S"),
    ("L40", 0.58, r"L40\b"),
    ("L4", 0.39, r"\bL4\b"),
    ("A10G", 0.40, r"A10G"),
    ("A10", 0.40, r"A10\b"),
    ("A30", 0.53, r"A30\b"),
    ("V100", 0.40, r"V100"),
    ("T4", 0.21, r"\bT4\b"),
)


MAX_SPEED = 1e6
"""The largest speed per GPU a kind may have (against an A100's 1.0)."""


@dataclass(frozen=True)
class Kind:
    """A node's GPU kind as the pool reports it: its name and speed per GPU, and what was
    wrong with the node's own declaration of them (ignored, for the operator's log)."""

    name: str
    speed: float = 1.0
    problems: tuple[str, ...] = ()


NO_BF16 = re.compile(r"(?<![A-Za-z0-9])(V100|T4|P100|P40|P4|K80|M60)(?![A-Za-z0-9])")
"""Kinds without bf16, by name (before Ampere: autocast to bf16 refuses to run there): the
catalogue's V100 and T4, and the older parts a model name may say (``Tesla-P100-PCIE-16GB``)."""
PRECISIONS = ("bf16", "fp16", "fp32")
"""Every precision, in the order a job falls back to them: a 16-bit one first (fp16 takes
bf16's memory and speed where bf16 is missing)."""


def precisions(kind: str) -> tuple[str, ...]:
    """The precisions a job may run on GPUs of ``kind``: every one but bf16 on a kind without
    it (:data:`NO_BF16`), in the order a job falls back to them. CPU-backed slots that declare
    such a kind are held to it too (so the tests run the fallback); a kind this does not know is
    assumed to have them all."""
    if NO_BF16.search(kind):
        return tuple(p for p in PRECISIONS if p != "bf16")
    return PRECISIONS


def catalogue_speed(name: str) -> float | None:
    """The catalogue's speed of a kind by its name (``None``: not in it)."""
    for known, speed, _ in CATALOGUE:
        if known == name:
            return speed
    return None


def model_kind(model: str) -> str:
    """The kind name of an NVML model name (``NVIDIA A100-SXM4-80GB`` -> ``A100``)."""
    for known, _, pattern in CATALOGUE:
        if re.search(pattern, model):
            return known
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", model.removeprefix("NVIDIA ").strip()).strip("-")
    return name[:64] or VIRTUAL


def node_kind(resources: Mapping[str, float], models: Sequence[str]) -> Kind:
    """A node's kind from its Ray resources and its GPUs' NVML model names (see the module
    doc for the order); several models on one node: the slowest (a gang can count on it)."""
    named = sorted(k.removeprefix(KIND_RESOURCE) for k in resources if k.startswith(KIND_RESOURCE))
    declared = [k for k in named if re.fullmatch(KIND_NAME, k)]
    problems = [
        f"declares the kind {k!r}, which is not a kind name ({KIND_NAME}): ignored"
        for k in named
        if k not in declared
    ]
    if len(declared) > 1:
        problems.append(f"declares the kinds {', '.join(declared)}: {declared[0]} taken")
    if declared:
        name = declared[0]
    elif models:
        names = {model_kind(m) for m in models}
        name = min(names, key=lambda n: (catalogue_speed(n) or 1.0, n))
    else:
        ray_kinds = sorted(
            k.removeprefix(RAY_ACCELERATOR) for k in resources if k.startswith(RAY_ACCELERATOR)
        )
        name = model_kind(ray_kinds[0]) if ray_kinds else VIRTUAL
    pct = resources.get(SPEED_RESOURCE)
    if pct is not None and not 0 < pct <= 100 * MAX_SPEED:
        problems.append(
            f"declares {SPEED_RESOURCE} {pct:g}, not a speed in percent above 0 and at most "
            f"{100 * MAX_SPEED:g}: the kind's own speed taken"
        )
        pct = None
    speed = pct / 100 if pct else catalogue_speed(name) or 1.0
    return Kind(name, float(speed), tuple(problems))


def job_speeds(measured: Mapping[str, float], priors: Mapping[str, float]) -> dict[str, float]:
    """A job's speed per GPU on each kind it was measured on, in the kinds' unit (the
    policies' ``kind_speed``), from its measured throughput per GPU there (``measured``: kind
    -> samples/s per GPU) and the kinds' speeds (``priors``).

    Throughput and speed differ by one factor per job, fitted on the measured kinds in log
    space (the geometric mean of ``prior / measured``): one kind measured gives that kind's
    own speed back (nothing is known yet about how this job ranks the kinds); two or more place
    the kinds by what the job showed, at the kinds' mean level. A kind not in ``priors`` (no
    longer in the pool) is left out.
    """
    known = {k: v for k, v in measured.items() if v > 0 and priors.get(k, 0) > 0}
    if not known:
        return {}
    logs = [math.log(priors[k] / v) for k, v in known.items()]
    scale = math.exp(sum(logs) / len(logs))
    return {k: scale * v for k, v in known.items()}


def predicted(
    kind: str, measured: Mapping[str, float], priors: Mapping[str, float]
) -> float | None:
    """A job's throughput per GPU on ``kind`` before it runs there: what it showed on the kinds
    it was measured on, scaled by the kinds' speeds (Sia's bootstrap: one measurement per
    kind, the rest predicted). ``None``: nothing measured, or ``kind`` unknown."""
    speeds = job_speeds(measured, priors)
    if not speeds or priors.get(kind, 0) <= 0:
        return None
    # the factor from speed back to throughput, as fitted on the measured kinds
    k0 = next(iter(speeds))
    return priors[kind] * measured[k0] / speeds[k0]


def min_speed(
    latencies: Mapping[str, Mapping[int, float]],
    speeds: Mapping[str, float],
    percentile: int,
    ceiling_ms: float,
) -> float:
    """The slowest speed per GPU at which an interactive job still meets its latency ceiling
    (the policies' ``min_speed``), from the step time percentile it showed on each kind
    (``latencies``) and its speed there (``speeds``: its own, else the kind's): a step takes
    the longer the slower the GPU, so a kind of speed ``s * measured / ceiling`` just meets it.
    The largest over the kinds measured (the cautious one); ``0.0``: nothing measured."""
    need = [
        speeds[k] * lat[percentile] / ceiling_ms
        for k, lat in latencies.items()
        if percentile in lat and k in speeds and ceiling_ms > 0
    ]
    return max(need, default=0.0)
