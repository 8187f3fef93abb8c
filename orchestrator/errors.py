"""One exceptions module for the control plane.

Every error a user can cause derives from :class:`OrchError`. The CLI prints ``str(err)`` on one
line (several lines for a :class:`SpecError`, one per problem) and exits with ``err.exit_code``;
``--debug`` shows the traceback. Errors carry data so callers never parse messages.
"""

from __future__ import annotations


class OrchError(Exception):
    """Root of every orchestrator error. ``exit_code`` is what the CLI returns."""

    exit_code: int = 1


class SpecError(OrchError):
    """A job file (or other user input) failed validation.

    Attributes:
        source: where the input came from (a file path, or ``"<input>"``).
        problems: one message per problem, each naming the field and what is allowed.
    """

    exit_code = 2

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        noun = "problem" if len(problems) == 1 else "problems"
        super().__init__(f"{source}: {len(problems)} {noun}:\n{lines}")


class ConfigError(OrchError):
    """Orchestrator settings (environment variables, config files) are invalid."""

    exit_code = 2


class OptionError(OrchError):
    """A command-line option or argument has a value that is not allowed (the API refuses
    the same value with 422).

    Attributes:
        option: the option (``--by``) or argument (``JOB``).
        problem: what is wrong and what is allowed (``must be at most 100,000, got 7e20``).
    """

    exit_code = 2

    def __init__(self, option: str, problem: str) -> None:
        self.option = option
        self.problem = problem
        super().__init__(f"{option} {problem}")


class WorkingDirError(OrchError):
    """A command job's working directory cannot be shipped: not a folder, a link leaving it,
    past the size limit, or (through the API) not a zip of the size it may have."""

    exit_code = 2


class ServerInstallMissing(OrchError):
    """A command needs what the server extra installs, and this is the light install (the
    client alone): refused before it starts anything.

    Attributes:
        missing: the first module of the server extra that is not installed.
        command: what needs it (``orch up``).
    """

    exit_code = 2

    def __init__(self, missing: str, command: str = "this command", then: str = "") -> None:
        self.missing = missing
        self.command = command
        super().__init__(
            f"{command} needs the server install (missing {missing}): "
            f"pip install 'sla-orchestrator[server]'; "
            + (then or "the light install talks to an API (ORCH_API_URL and ORCH_TOKEN)")
        )


class StoreError(OrchError):
    """The Redis store could not be reached or started."""


class JobNotFound(OrchError):
    """No job with this id (or name) exists under the namespace (a bad reference: exit 2, as
    the API's 404 is in API mode)."""

    exit_code = 2

    def __init__(self, ref: str) -> None:
        self.ref = ref
        super().__init__(f"no job matches {ref!r} (see `orch list`)")


class AmbiguousJob(OrchError):
    """A job reference (a name) matches several jobs."""

    exit_code = 2

    def __init__(self, ref: str, matches: list[str]) -> None:
        self.ref = ref
        self.matches = matches
        super().__init__(f"{ref!r} matches {len(matches)} jobs: {', '.join(matches)}; use the id")


class IllegalTransition(OrchError):
    """The state machine refused a transition (the job was not in an allowed state)."""

    def __init__(self, job_id: str, current: str, target: str) -> None:
        self.job_id = job_id
        self.current = current
        self.target = target
        super().__init__(f"job {job_id} is {current}; it cannot become {target}")


class PoolError(OrchError):
    """The Ray pool could not be started, joined or used."""


class TuneError(OrchError):
    """The tuner cannot run for this job (its bounds leave nothing to search, or its study is
    unusable); an unmet SLA is a verdict, not this error."""

    exit_code = 2


class JobEnded(OrchError):
    """A job asked to stop has already ended, or is already being stopped (a refusal: exit 2,
    as the API's 409 is in API mode)."""

    exit_code = 2

    def __init__(self, job_id: str, state: str) -> None:
        self.job_id = job_id
        self.state = state
        super().__init__(f"job {job_id} is already {state}")


class NotAService(OrchError):
    """A service's endpoint was asked of a job that is not a service with an endpoint (no
    ``serve:``, or ``serve.endpoint: false``)."""

    exit_code = 2


class Unauthenticated(OrchError):
    """An API request carried no token, or one that is unknown, malformed or revoked."""

    exit_code = 2


class Forbidden(OrchError):
    """The principal's role or team does not allow this (a member acting on another team's
    job, a viewer submitting, anyone but an admin managing teams or tokens)."""

    exit_code = 2


class TokenNotFound(OrchError):
    """No API token with this id exists in the namespace."""

    exit_code = 2

    def __init__(self, token_id: str) -> None:
        self.token_id = token_id
        super().__init__(f"no token with id {token_id!r} (see `orch tokens list`)")


class ApiError(OrchError):
    """The API server refused a request or could not be reached (the SDK client raises it).

    Attributes:
        status: the HTTP status, or ``None`` when no answer came.
        problems: one line per problem the server named (a 422 names each field).
        exit_code: 2 for a refused request (4xx), 1 otherwise.
    """

    def __init__(self, status: int | None, problems: list[str]) -> None:
        self.status = status
        self.problems = problems
        self.exit_code = 2 if status is not None and 400 <= status < 500 else 1
        where = f"HTTP {status}" if status is not None else "no answer"
        text = problems[0] if len(problems) == 1 else "\n" + "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"API ({where}): {text}")


class NotPublished(OrchError):
    """Nothing to show yet: no scheduler publishes a pool view for the namespace, or no team
    config was applied."""
