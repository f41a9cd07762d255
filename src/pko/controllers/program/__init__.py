"""The Program controller: a Program becomes a deterministic ``.tar.gz`` served by the operator's file server.

:func:`setup` wires it into a :class:`pko.runtime.Manager`; run the returned :meth:`Programs.serve` next to the
manager (on every replica). The pure parts — the status plan, the file server's answers and the advertised
address — live in :mod:`~.plan`, :mod:`~.serving` and :mod:`~.address`; the archive itself in
:mod:`pko.sources.program`.
"""

from pko.controllers.program.controller import PROGRAMS_ACTIVE, Programs, lookup, setup

__all__ = ["PROGRAMS_ACTIVE", "Programs", "lookup", "setup"]
