"""The trees a hostile team hands the pool (``tests/e2e/test_hostile.py``), written from the
strings here so that no start-up hook is ever committed where a tool of ours could import it.

Every start-up hook (``sitecustomize.py``, ``usercustomize.py``, a ``.pth`` file, a module
shadowing one the worker imports) leaves a marker ``<name>-uid<uid>-<pid>`` in a markers
folder (1777, as /tmp) when Python runs it: a marker of uid 0 is a team's code run as root.
"""

from __future__ import annotations

import os
from pathlib import Path

_MARK = """
import os as _os
try:
    open(_os.path.join({d!r}, "{name}-uid%d-%d" % (_os.getuid(), _os.getpid())), "w").close()
except OSError:
    pass
"""


def hooks(markers: Path) -> dict[str, str]:
    """The start-up hooks, each leaving its marker in ``markers``."""
    d = str(markers)
    return {
        "sitecustomize.py": _MARK.format(d=d, name="sitecustomize"),
        "usercustomize.py": _MARK.format(d=d, name="usercustomize"),
        # a .pth line that starts with "import" is run by site.py in a site folder
        "orch_hook.pth": (
            f"import os; os.path.isdir({d!r}) and open(os.path.join({d!r}, "
            '"pth-uid%d-%d" % (os.getuid(), os.getpid())), "w").close()\n'
        ),
        # a module the privileged worker imports after its start: the store's client
        "redis.py": _MARK.format(d=d, name="shadow-redis") + "raise ImportError('planted')\n",
    }


ATTACK = r'''
"""A hostile team's script: python attack.py MODE [ARG]."""
import glob, json, os, socket, sys, time
from pathlib import Path

from workers import job

ctx = job.context()
mode = sys.argv[1]


def attempt(fn):
    try:
        return "done:" + str(fn())[:80]
    except OSError as err:
        return "refused:" + type(err).__name__


def say(what, found):
    print(what + " " + json.dumps(found), flush=True)


if mode == "probe":  # another team's unpacked code, its logs, the jobs' checkpoints
    others = json.loads(sys.argv[2])
    found = {"uid": os.getuid()}
    # what each try on another run's folder got, by outcome (one short line, however many
    # folders other tests' runs have beside it)
    for kind in ("list", "plant"):
        found[kind] = {}
    for folder in sorted(glob.glob("/tmp/orch-cmd-*")):
        if os.path.realpath(folder) == os.path.realpath(os.environ["HOME"]):
            continue  # its own
        for kind, got in (
            ("list", attempt(lambda: os.listdir(folder))),
            ("plant", attempt(lambda: Path(folder, "work", "victim.py").write_text("PLANTED"))),
        ):
            outcome = got if got.startswith("refused:") else "done"
            found[kind][outcome] = found[kind].get(outcome, 0) + 1
    for name, path in others.items():
        found[name] = attempt(
            lambda: os.listdir(path) if os.path.isdir(path) else Path(path).read_bytes()
        )
    found["ray_sessions_write"] = attempt(lambda: Path("/tmp/ray/planted").write_text("x"))
    say("PROBE", found)
    Path(sys.argv[3]).write_text("probed")  # the victim may end now
elif mode == "daemon":  # a double-forked, detached process that would outlive the job
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(w, str(os.getpid()).encode())
            time.sleep(600)
            os._exit(0)
        os._exit(0)
    os.close(w)
    pid = os.read(r, 32).decode()
    Path(ctx.checkpoint_dir, "daemon.pid").write_text(pid)
    say("DAEMON", {"pid": int(pid)})
elif mode == "forks":  # a bounded fork bomb: at most 2,000 processes
    made = 0
    try:
        for _ in range(2000):
            if os.fork() == 0:
                time.sleep(120)
                os._exit(0)
            made += 1
    except OSError as err:
        say("FORKS", {"made": made, "error": type(err).__name__})
    else:
        say("FORKS", {"made": made, "error": None})
elif mode == "hog":  # takes host memory until something stops it
    hog = []
    for _ in range(64):
        hog.append(bytearray(64 << 20))
        for i in range(0, len(hog[-1]), 4096):
            hog[-1][i] = 1
    say("HOG", {"mb": 64 * len(hog)})
elif mode == "listen":  # a listener, and the host's Redis, in a job that declared no network
    server = socket.socket()
    server.bind(("0.0.0.0", 0))
    server.listen()
    port = server.getsockname()[1]
    redis = attempt(lambda: socket.create_connection(("127.0.0.1", 6379), timeout=2))
    say("LISTEN", {"port": port, "redis": redis})
    server.settimeout(float(sys.argv[2]))
    say("ACCEPTED", {"got": attempt(lambda: server.accept())})
for step in range(int(os.environ.get("STEPS", "3"))):
    job.report(samples=1, loss=0.0)
'''

VICTIM = r'''
"""Another team's script: it runs until the attacker is done (the flag file ``argv[1]``, or
60 s), then says it is itself."""
import os, sys, time
from workers import job

deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    job.report(samples=1, loss=0.0)
    time.sleep(0.2)
print("VICTIM original", flush=True)
'''


def write_tree(folder: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative name -> text) under ``folder``, readable by every uid (as an
    operator's installed packages are), and return it."""
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for here, _, names in os.walk(folder):
        os.chmod(here, 0o755)
        for n in names:
            os.chmod(os.path.join(here, n), 0o644)
    return folder


def command_tree(folder: Path, markers: Path) -> Path:
    """A command job's working directory: the attack and victim scripts among the hooks."""
    return write_tree(folder, {**hooks(markers), "attack.py": ATTACK, "victim.py": VICTIM})


def team_code_tree(folder: Path, markers: Path) -> Path:
    """An operator's folder of a team's packages (``ORCH_TEAM_CODE_PATH``): the allowed
    package ``teampkg``, and the hooks at the folder's top and in the package."""
    planted = hooks(markers)
    package = {
        "teampkg/__init__.py": "",
        "teampkg/work.py": "from tests.workers.sample_workload import build\n",
        "teampkg/sitecustomize.py": _MARK.format(d=str(markers), name="pkg-sitecustomize"),
        "teampkg/orch_hook.pth": planted["orch_hook.pth"],
    }
    return write_tree(folder, {**planted, **package})


def open_markers(markers: Path) -> Path:
    """``markers``, made writable by every uid."""
    markers.mkdir(parents=True, exist_ok=True)
    markers.chmod(0o1777)
    return markers


def left(markers: Path) -> list[str]:
    """The markers left in ``markers`` so far."""
    return sorted(p.name for p in markers.iterdir()) if markers.is_dir() else []
