"""The child's side of the sandbox (:mod:`workers.sandbox` is the worker's): ``python -m
workers.sandbox_child FD`` runs one rank's harness as the worker asked on stdin (stop and fence
messages follow there, and a service replica's requests), and answers on the descriptor ``FD``:
its reports (and a replica's answers), then its result or its error, one JSON message a line.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import threading
import time
from typing import Any


def _child_main(msg_fd: int) -> int:
    """Run the harness as the worker asked on stdin; answer on ``msg_fd`` (see the module doc)."""
    messages = os.fdopen(msg_fd, "w", buffering=1)
    write_lock = threading.Lock()

    def say(message: dict[str, Any]) -> None:
        with write_lock:
            messages.write(json.dumps(message, default=str) + "\n")

    init = json.loads(sys.stdin.readline())
    stop, deposed = threading.Event(), threading.Event()
    requests = None
    if init.get("endpoint"):  # a service's replica: requests come from the worker
        from workers.serve_endpoint import PipedRequests

        requests = PipedRequests(say)

    def listen() -> None:
        for line in sys.stdin:
            with contextlib.suppress(ValueError, AttributeError):
                message = json.loads(line)
                if message.get("stop"):
                    stop.set()
                if message.get("fenced"):
                    deposed.set()
                if requests is not None:
                    requests.feed(message)

    threading.Thread(target=listen, daemon=True).start()
    try:
        from workers.config import HarnessConfig
        from workers.harness import Harness

        # What the imports made (torch, the modules) lives as long as this one-run process: out
        # of the collector's reach, the collection the run starts with (its memory peak is its
        # own) scans only what came after; over torch's heap it took 0.2-0.3 s of every start
        gc.collect()
        gc.freeze()
        harness = Harness(
            HarnessConfig.from_dict(init["config"]),
            rank=init["rank"],
            world_size=init["world_size"],
            init_method=init["init_method"],
            checkpoint_dir=init["checkpoint_dir"],
            report=(lambda r: say({"report": r})) if init["report"] else None,
            report_every_s=init["report_every_s"],
            should_stop=stop.is_set,
            num_threads=init["num_threads"],
            fence=lambda: not deposed.is_set(),
            run_tag=init["run_tag"],
            requests=requests,
        )
        say({"result": harness.run().to_dict()})
    except Exception as err:
        print_team_traceback(err)
        say({"error": {"type": type(err).__name__, "message": f"{err}"}})
        return 1
    finally:
        time.sleep(0)  # let the report writer's last line out before the pipe closes
    return 0


def _server_roots() -> tuple[str, ...]:
    """The folders of the server's own code: this package (the harness), the control plane
    beside it, and Python's install (its standard library and site-packages)."""
    here = os.path.dirname(os.path.abspath(__file__))
    roots = {here, os.path.join(os.path.dirname(here), "orchestrator")}
    roots |= {os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return tuple(os.path.join(r, "") for r in sorted(roots))


def print_team_traceback(err: BaseException, file: Any = None) -> None:
    """The traceback of a failure as the team's own output: the frames of its code only (its
    workload's files), each exception of the chain with its message. The harness's frames and
    those of the libraries installed with the server name the server's paths and tell the team
    nothing it can change; a failure with no frame of the team's code prints nothing here,
    its one-line reason ends the log all the same (``workers.actor``)."""
    import traceback

    roots = _server_roots()
    shown = traceback.TracebackException.from_exception(err)
    team_frames = 0
    seen: set[int] = set()
    stack: list[traceback.TracebackException | None] = [shown]
    while stack:
        te = stack.pop()
        if te is None or id(te) in seen:
            continue
        seen.add(id(te))
        own = [f for f in te.stack if not os.path.abspath(f.filename).startswith(roots)]
        team_frames += len(own)
        te.stack = traceback.StackSummary.from_list(own)
        stack += [te.__cause__, te.__context__]
    if team_frames:
        print("".join(shown.format()), end="", file=file or sys.stderr)


if __name__ == "__main__":
    sys.exit(_child_main(int(sys.argv[1])))
