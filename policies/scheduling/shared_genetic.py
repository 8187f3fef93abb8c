"""``shared-genetic``: ``shared`` with the settings that beat Pollux's published JCT (issue 16)."""

from __future__ import annotations

from typing import Any

from policies.scheduling.base import SCHEDULING_POLICIES
from policies.scheduling.shared import SharedSchedulingPolicy

SETTINGS: dict[str, Any] = {
    "elastic": "genetic",
    "las_first_gpu_s": 8 * 3600.0,
    "min_runtime_s": 0.0,
}
"""What ``shared-genetic`` changes of ``shared``'s defaults (any of them may still be given)."""


@SCHEDULING_POLICIES.register("shared-genetic")
class SharedGeneticSchedulingPolicy(SharedSchedulingPolicy):
    """``shared``, every interactive, team, deadline and first-step rule included, with three
    settings changed (:data:`SETTINGS`):

    * ``elastic="genetic"``: the bulk GPUs left after admission are spread by the reproduced
      Pollux's genetic search (:class:`~policies.elastic.GeneticElastic`; Qiao et al., OSDI'21,
      section 4.2), which crosses dips in a speedup curve and re-spreads a large job's GPUs
      when jobs arrive, where greedy goodput keeps running jobs where they are. Its restart
      penalty counts the work a change throws away (``ElasticJob.lost_s``, the time since the
      job's checkpoint), not only the restart.
    * ``las_first_gpu_s=28800`` (8 GPU-hours): fewer jobs leave the first LAS level, so fewer
      are preempted for newer ones.
    * ``min_runtime_s=0``: no minimum run before a bulk job may be preempted for other bulk
      (a run that has not stepped yet is still never a victim).

    Measured (BENCHMARKS.md, issue 16), on the simulator with the live snapshot builder: mean
    JCT 0.872x / 0.923x the published Pollux figure at loads 0.5 / 1.0 on the Pollux
    workloads (below it on all 16), and on the mixed benchmark (b) bulk mean JCT 1.054x the
    reproduced Pollux with 100% interactive attainment. Not the default: its round costs
    several times ``shared``'s (the search runs every round a job is open to more GPUs; the
    mixed benchmark's simulation takes about 9x as long), and it resizes more. Since issue 26
    part 4, ``shared`` optimises the same objective exactly (``elastic="search"``) at about
    ``shared``'s former cost: 0.877x / 0.922x on the Pollux workloads.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**SETTINGS, **kwargs})
