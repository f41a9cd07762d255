"""The controller runtime: informers, work queues, controllers, leader election and the manager.

Layers above import this package whole (``from pko import runtime``) and use the names below. Pure decisions
live in their own modules (:mod:`~pko.runtime.ratelimit`, :mod:`~pko.runtime.handlers`,
:mod:`~pko.runtime.leaderelection`, :mod:`~pko.runtime.store`); the rest is thin asyncio I/O around them.

A controller in a few lines::

    mgr = runtime.Manager(client, leader_election=runtime.LeaderElection(namespace="pulumi-system"))
    stacks = mgr.informer("Stack", indexers={"program": lambda s: [...]})
    mgr.controller("stack-controller", reconcile, workers=25) \
        .watch(stacks, predicate=runtime.generation_changed) \
        .watch(mgr.informer("Workspace"), runtime.for_controller(kube.resources.STACK))
    await mgr.run()   # until cancelled; reconcile(key) runs only while this process holds the Lease

This package may import ``pko.kube`` and ``pko.api`` only, and must never know about Stacks or Workspaces:
controllers bring that knowledge.
"""

from pko.runtime.controller import Controller, Reconciler, Result
from pko.runtime.handlers import (
    annotation_changed,
    for_controller,
    for_mapping,
    for_object,
    generation_changed,
)
from pko.runtime.informer import Informer
from pko.runtime.leaderelection import Timing
from pko.runtime.manager import LeaderElection, Manager
from pko.runtime.store import Event, Store
from pko.runtime.workqueue import WorkQueue

__all__ = [
    "Controller",
    "Event",
    "Informer",
    "LeaderElection",
    "Manager",
    "Reconciler",
    "Result",
    "Store",
    "Timing",
    "WorkQueue",
    "annotation_changed",
    "for_controller",
    "for_mapping",
    "for_object",
    "generation_changed",
]
