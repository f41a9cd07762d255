"""What the program file server answers to ``GET /programs/<namespace>/<name>/<generation>``, as pure functions.

Why: the archive is never stored; every request takes it from the Program as it is now (built once for each uid and
generation, :func:`pko.sources.program.build`), and only for the generation the URL names — an old URL must stop
working once the Program changes (``404``), so a workspace can never build from a program other than the one whose
digest it was given. Answers follow the Go operator: ``400`` when the path does not have exactly three parts,
``404`` when the Program is missing or at another generation (an unparsable generation is generation 0, which never
exists), else the ``.tar.gz`` with ``Content-Type: application/gzip`` and ``Content-Disposition: attachment;
filename=project.tar.gz``.

Pure: the request path and the Program (or ``None``) in, status, headers and body out. Must never do I/O.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

from pko.api import program as program_api
from pko.controllers.program import plan
from pko.sources import program as artifacts

ARCHIVE_HEADERS = (("Content-Type", "application/gzip"),
                   ("Content-Disposition", "attachment; filename=project.tar.gz"))
ERROR_HEADERS = (("Content-Type", "text/plain; charset=utf-8"), ("X-Content-Type-Options", "nosniff"))


@dataclasses.dataclass(frozen=True)
class ProgramRef:
    """The Program (and generation) a request asks for."""

    namespace: str
    name: str
    generation: int


@dataclasses.dataclass(frozen=True)
class Reply:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


def error(status: int, message: str) -> Reply:
    return Reply(status, ERROR_HEADERS, f"{message}\n".encode())


def _generation(text: str) -> int:
    """Go's ``strconv.ParseInt`` with the error ignored: anything but a plain decimal integer is 0."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        return 0
    value = int(text)
    return value if -(2**63) <= value < 2**63 else 0


def parse(target: str) -> ProgramRef | Reply:
    """The Program a request target names, or the ``400``/``404`` reply for a target that names none."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(target).path)
    if not path.startswith(plan.ROUTE_PREFIX):
        return error(404, "404 page not found")
    identifier = path[len(plan.ROUTE_PREFIX):]
    if not identifier:
        return error(400, "Program identifier is required.")
    parts = identifier.split("/")
    if len(parts) != 3:
        return error(400, "invalid program identifier, unable to locate Program")
    namespace, name, generation = parts
    return ProgramRef(namespace, name, _generation(generation))


def reply(ref: ProgramRef, obj: dict[str, Any] | None) -> Reply:
    """The answer for ``ref`` given the Program as it is now (``None``: it does not exist)."""
    if obj is None:
        return error(404, f'programs.{program_api.GROUP} "{ref.name}" not found')
    program = program_api.Program.model_validate(obj)
    generation = program.metadata.generation or 0
    if generation != ref.generation:
        return error(404, f"program {ref.namespace}/{ref.name} with generation {generation} does not match "
                          f"requested generation {ref.generation}")
    return Reply(200, ARCHIVE_HEADERS, artifacts.build(program).data)
