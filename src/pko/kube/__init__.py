"""The thin async client layer over lightkube, plus pure helpers (strategic merge, owner references).

Layers above import this package whole (``from pko import kube``) and use the names below; the modules stay
importable on their own (``from pko.kube import smp``). Objects are plain dicts (:mod:`pko.kube.objects`).

This package must never import from the layers above it (runtime, controllers, ...): only ``pko.api`` may be
imported, and nothing here needs even that.
"""

from pko.kube.client import FIELD_MANAGER, Client, ObjectList, WatchEvent
from pko.kube.errors import AlreadyExists, ApiError, Conflict, Forbidden, Gone, Invalid, NotFound
from pko.kube.objects import Object, ObjectKey, key_of
from pko.kube.resources import Kind, register, resource

__all__ = [
    "FIELD_MANAGER",
    "AlreadyExists",
    "ApiError",
    "Client",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "Kind",
    "NotFound",
    "Object",
    "ObjectKey",
    "ObjectList",
    "WatchEvent",
    "key_of",
    "register",
    "resource",
]
