"""API errors as a small exception hierarchy, so callers write ``except kube.NotFound`` instead of code checks.

Every error the client layer raises for a failed API call is an :class:`ApiError` (or a subclass picked by the
HTTP status code); the Kubernetes ``Status`` reason and message are kept. Transport errors (connection refused,
timeouts) are passed through unchanged: they are not API answers.

This module must never do I/O.
"""

from __future__ import annotations

from typing import Any

import httpx2
import lightkube

TransportError = httpx2.TransportError
"""No answer from the API server (connection refused, timeout): passed through, named here for callers."""


class ApiError(Exception):
    """The API server answered with a failure ``Status``."""

    def __init__(self, code: int, reason: str = "", message: str = "", details: dict[str, Any] | None = None):
        super().__init__(f"{code} {reason}: {message}" if reason else f"{code}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}


class BadRequest(ApiError):
    """400."""


class Unauthorized(ApiError):
    """401."""


class Forbidden(ApiError):
    """403."""


class NotFound(ApiError):
    """404: the object (or its namespace, or its kind) does not exist."""


class Conflict(ApiError):
    """409: stale resourceVersion, already exists, or a server-side apply conflict."""


class AlreadyExists(Conflict):
    """409 with reason ``AlreadyExists``."""


class Gone(ApiError):
    """410: the requested resourceVersion is too old (watch must relist)."""


class Invalid(ApiError):
    """422: the object failed validation."""


class TooManyRequests(ApiError):
    """429."""


_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def from_status(code: int, reason: str = "", message: str = "", details: dict[str, Any] | None = None) -> ApiError:
    """The exception for a failure ``Status``."""
    cls = _BY_CODE.get(code, ApiError)
    if code == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    return cls(code, reason, message, details)


def translate(err: lightkube.ApiError) -> ApiError:
    """A lightkube ``ApiError`` as one of ours."""
    status = err.status
    details = status.details.to_dict() if status.details is not None else None
    code = int(status.code or 0)
    if not code:
        response = getattr(err, "response", None)
        code = int(getattr(response, "status_code", 0) or 0)
    return from_status(code, status.reason or "", status.message or "", details)
