"""pko: the fetch an agent makes before it serves (``agent serve --fetch-from-stdin``), as the operator asks for it.

Why: the ``local`` runtime started a Python process for ``agent init`` and another for ``agent serve`` in each
workspace, and the first spent about 0.2 CPU s starting for a fetch of a few milliseconds (a Program's artifact): a
tenth of what a Stack cost in a 100-Stack fleet on two cores. Now it starts one: ``serve`` reads this request on
its stdin, fetches as ``init`` would, then serves. The request comes on stdin, never in argv or the environment,
because it holds the fetch's credentials (``GIT_PASSWORD``, a private key): the agent's environment is inherited by
the Pulumi CLI and the program, which a pod's ``pulumi`` container never sees its ``fetch`` container's either.
A workspace pod keeps its ``fetch`` init container; nothing changes there.

``source`` holds ``init``'s flags by their option names (``target_dir``, ``git_url``, ``git_revision``,
``flux_url``, ``flux_digest``, ``project_name``, ``project_runtime``); ``env`` the fetch container's variables;
``inside`` the project's folder in the source (``GIT_DIR``/``FLUX_DIR``), which must stay inside it once fetched;
``report`` the file where the agent writes the outcome, ``{"seconds": s}`` or ``{"error": message}``: the
operator tells a failed fetch from a failed start by it, and times the fetch phase with it.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class FetchRequest:
    source: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    inside: str = ""
    report: str = ""

    def to_json(self) -> str:
        return json.dumps({"source": self.source, "env": self.env, "inside": self.inside, "report": self.report})

    @classmethod
    def from_json(cls, text: str) -> FetchRequest:
        """The request in `text`; ValueError when it is none (the message never quotes it: it holds secrets)."""
        try:
            data = json.loads(text)
            source = {str(k): str(v) for k, v in dict(data["source"]).items()}
            env = {str(k): str(v) for k, v in dict(data.get("env") or {}).items()}
            return cls(source, env, str(data.get("inside") or ""), str(data.get("report") or ""))
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            raise ValueError(f"invalid fetch request: {type(err).__name__}") from None


@dataclass(frozen=True)
class Outcome:
    """What the agent reported: the seconds the fetch took, or why it failed; neither while it still fetches."""

    seconds: float | None = None
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.seconds is not None or self.error is not None


def write_report(request: FetchRequest, *, seconds: float | None = None, error: str | None = None) -> None:
    if not request.report:
        return
    outcome = {"seconds": seconds} if error is None else {"error": error}
    with contextlib.suppress(OSError):
        Path(request.report).write_text(json.dumps(outcome))


def read_report(path: Path) -> Outcome:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return Outcome()
    if not isinstance(data, dict):
        return Outcome()
    if isinstance(data.get("error"), str):
        return Outcome(error=data["error"])
    seconds = data.get("seconds")
    return Outcome(seconds=float(seconds)) if isinstance(seconds, int | float) else Outcome()
