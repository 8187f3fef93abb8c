"""Twin benchmark: the twin test's trace live and in the simulator, both timelines recorded.

    .venv/bin/python bench/twin/run.py        # about 3.5 minutes on 2 cores

The trace, the live run, the replay and the comparison are those of the twin test
(``tests/e2e/twin.py``; the test asserts that they agree): 18 short real jobs under ``shared`` on
a local Ray cluster with virtual GPUs (a head, a 4-GPU node, a 2-GPU node), as the end-to-end
tests build it, against a real Redis (``REDIS_URL``, else the embedded server). This script
prints both timelines and their disagreements, and writes ``bench/twin/results/twin.json``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.e2e.conftest import start_orch
from tests.e2e.twin import TIE_S, run_twin

RESULTS = Path(__file__).parent / "results"


def main() -> int:
    """Run the trace live, then simulated; print and write the comparison."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    cluster.add_node(num_cpus=1, num_gpus=4)
    cluster.add_node(num_cpus=1, num_gpus=2)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    data = Path(tempfile.mkdtemp(prefix="twin-"))
    redis_url = os.environ.get("REDIS_URL") or None  # None: the embedded server
    o = start_orch(cluster.address, redis_url, f"twin-{uuid.uuid4().hex[:6]}", data, "shared")
    try:
        twin = run_twin(o)
    finally:
        o.running.shutdown()
        o.store.delete_namespace()
        ray.shutdown()
        cluster.shutdown()
    print(twin.report())
    problems = twin.disagreements(TIE_S)
    print("agree" if not problems else "DIFFER:\n  " + "\n  ".join(problems))
    t0 = twin.live[0][0]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "twin.json").write_text(
        json.dumps(
            {
                "meta": {
                    "date": time.strftime("%Y-%m-%d"),
                    "median_start_s": twin.median_start_s,
                    "replay": twin.variant,
                },
                "disagreements": problems,
                "live": [(round(t - t0, 2), w, j) for t, w, j in twin.live],
                "simulated": [(round(t, 2), w, j) for t, w, j in twin.simulated],
            },
            indent=1,
        )
    )
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
