"""Benchmark names for scheduling policies with settings other than their defaults (issue 16).

Both :mod:`mixed` and :mod:`pollux` take these names in ``--policies`` beside the registered
ones (``shared-genetic`` is registered: the setting that issue 16 ships); each is measured in
BENCHMARKS.md, raw figures in ``results/``:

* ``shared-genetic-elastic``: ``shared`` with only its bulk GPUs spread by the Pollux genetic
  search (:class:`~policies.elastic.GeneticElastic`), LAS levels and minimum run time as in
  ``shared``;
* ``shared-genetic-elastic-blind``: the same, the search's restart penalty counting the restart
  alone (``count_lost=False``, as Pollux; ``shared-genetic`` as first measured at ``c12b800``);
* ``shared-genetic-blind``: ``shared-genetic`` with ``count_lost=False``;
* ``shared-las8h``: ``shared`` with the first LAS level at 8 GPU-hours (default 1) and no
  minimum run time before a bulk job may be preempted for other bulk (default 300 s);
* ``shared-unsticky``: the goodput allocator without its sticky step
  (``GoodputElastic(sticky=False)``);
* ``shared-las8h-unsticky``: both;
* ``shared-young-kept``: ``shared`` whose jobs younger than ``min_runtime_s`` keep their GPUs
  against other bulk jobs whatever their team holds (default: only while their team holds no
  more than its entitlement; a guarantee's reclaim takes them either way), issue 28;
* ``shared-running-first``: ``shared`` with running jobs admitted before queued ones within
  each LAS level in every round (by default only in rounds with a deadline at risk), issue 28.
* ``shared-plan``: ``shared`` whose admission plan's verdict binds: a deadline job the plan
  declined runs best effort (issue 26).
* ``shared-goodput``: ``shared`` as it was before issue 26 part 4, its spare GPUs spread by the
  greedy goodput allocator (``elastic="goodput"``, sticky) instead of the search;
* ``shared-search``: ``shared`` whose search maximises the harmonic mean of speedups
  (``SearchElastic(p=-1)``, Pollux's and ``genetic``'s objective; the default as first
  measured, the ``shared`` of ``results/*-issue26-part4.json``);
* ``shared-search-las8h``: that, with ``shared-las8h``'s LAS and minimum run time settings;
* ``shared-search-priced``: ``shared`` whose search always takes the Lagrangian price, never
  the exact program (``SearchElastic(exact_cells=0)``);
* ``shared-search-log``, ``shared-search-sum``: ``shared`` whose search maximises the
  geometric mean of speedups (``p=0``: ``shared`` itself since it was measured) or their sum
  (``p=1``).
* ``shared-lost-best-effort``: ``shared`` whose deadline jobs that no size can save run best
  effort whatever work they have left (``short_first_s=0``, the default before; issue 26);
  ``shared-short900``: such a job keeps its place in the class with up to 900 s of work left
  (default 300 s).
* ``shared-part4``: ``shared`` as it was before issue 26 part 5: no served weight in the
  search (``SearchElastic(served_scale_s=0)``) and a minimum run time of 300 s (now 120 s);
  ``shared-unserved``: only the first, ``shared-minrt300``: only the second;
  ``shared-minrt0``: no minimum run time; ``shared-minrt60``, ``shared-minrt180``: 60 s and
  180 s; ``shared-served8h``: the served weight's scale at 8 GPU-hours (default 4).
  Variants are ``shared`` with one change from its current default.
* ``shared-kinds-placed``: in a pool of several kinds, the homogeneous search's counts placed
  kind by kind, then ``kind_moves`` (``kind_plan=False``: ``shared`` before its kinds were
  chosen with the counts, issue 40); ``shared-search-half``: the search's power mean at
  ``p=-0.5`` (Sia's).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from policies import SCHEDULING_POLICIES
from policies.elastic import GeneticElastic, GoodputElastic, SearchElastic
from policies.scheduling import SchedulingPolicy

LAS_8H: dict[str, Any] = {"las_first_gpu_s": 8 * 3600.0, "min_runtime_s": 0.0}
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "shared-genetic-elastic": ("shared", {"elastic": "genetic"}),
    "shared-genetic-elastic-blind": ("shared", {"elastic": GeneticElastic(count_lost=False)}),
    "shared-genetic-blind": ("shared-genetic", {"elastic": GeneticElastic(count_lost=False)}),
    "shared-las8h": ("shared", LAS_8H),
    "shared-unsticky": ("shared", {"elastic": GoodputElastic(sticky=False)}),
    "shared-las8h-unsticky": ("shared", {**LAS_8H, "elastic": GoodputElastic(sticky=False)}),
    "shared-young-kept": ("shared", {"young_kept": True}),
    "shared-running-first": ("shared", {"running_first": True}),
    "shared-no-edf": ("shared", {"edf": False}),
    "shared-guarantee-growth": ("shared", {"guarantee_growth": True}),
    "shared-restart-only": ("shared", {"elastic": GoodputElastic(count_lost=False)}),
    "shared-defer": ("shared", {"defer": True}),
    "shared-plan": ("shared", {"plan": True}),
    "shared-goodput": ("shared", {"elastic": "goodput"}),
    "shared-search": ("shared", {"elastic": SearchElastic(p=-1.0)}),
    "shared-search-las8h": ("shared", {**LAS_8H, "elastic": SearchElastic(p=-1.0)}),
    "shared-search-priced": ("shared", {"elastic": SearchElastic(p=-1.0, exact_cells=0)}),
    "shared-search-log": ("shared", {"elastic": SearchElastic(p=0.0)}),
    "shared-search-sum": ("shared", {"elastic": SearchElastic(p=1.0)}),
    "shared-lost-best-effort": ("shared", {"short_first_s": 0.0}),
    "shared-short900": ("shared", {"short_first_s": 900.0}),
    "shared-part4": (
        "shared",
        {"min_runtime_s": 300.0, "elastic": SearchElastic(served_scale_s=0.0)},
    ),
    "shared-unserved": ("shared", {"elastic": SearchElastic(served_scale_s=0.0)}),
    "shared-minrt300": ("shared", {"min_runtime_s": 300.0}),
    "shared-minrt0": ("shared", {"min_runtime_s": 0.0}),
    "shared-minrt60": ("shared", {"min_runtime_s": 60.0}),
    "shared-minrt180": ("shared", {"min_runtime_s": 180.0}),
    "shared-served8h": ("shared", {"elastic": SearchElastic(served_scale_s=8 * 3600.0)}),
    "shared-kinds-placed": ("shared", {"kind_plan": False}),
    "shared-search-half": ("shared", {"elastic": SearchElastic(p=-0.5)}),
    "shared-issue25": (
        "shared",
        {"edf": False, "guarantee_growth": True, "elastic": GoodputElastic(count_lost=False)},
    ),
}
"""Benchmark name -> (registered policy, its arguments)."""


def create(name: str) -> SchedulingPolicy:
    """The policy under its benchmark name: a variant above, else the registered policy."""
    policy, kwargs = VARIANTS.get(name, (name, {}))
    return SCHEDULING_POLICIES.create(policy, **kwargs)
