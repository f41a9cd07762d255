"""Tie an agent process's life to the operator that started it (the `local` workspace runtime).

When `$PKO_AGENT_PARENT_PID` names our parent, ask Linux to send SIGTERM when that parent dies (prctl
PR_SET_PDEATHSIG) — so a SIGKILLed operator leaves no agent behind — and exit at once if the parent is already
gone. It runs in the agent itself at start-up, never between fork and exec (unsafe in the threaded operator).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Mapping

PARENT_ENV = "PKO_AGENT_PARENT_PID"
PR_SET_PDEATHSIG = 1


def hold(env: Mapping[str, str] = os.environ) -> None:
    expected = env.get(PARENT_ENV)
    if not expected or not expected.isdigit():
        return
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):
            return
    if os.getppid() != int(expected):  # the operator died before we could ask
        raise SystemExit(1)
