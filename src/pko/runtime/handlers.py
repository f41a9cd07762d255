"""From cache events to reconcile keys: mappers and predicates, as pure functions.

A controller watches several kinds; for each event it asks a *predicate* whether the event matters and a
*mapper* which keys to reconcile. The Stack controller, for instance, reconciles a Stack when the Stack's
generation changes, when a Workspace it controls changes (:func:`for_controller`), and when a Program that Stacks
reference gets a new artifact (:func:`for_mapping` over an index).

Everything here is pure: functions of an :class:`pko.runtime.store.Event`. No I/O, no queue access.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pko.kube import objects, owners, resources
from pko.runtime.store import Event

Key = objects.ObjectKey
Mapper = Callable[[Event], Iterable[Key]]
Predicate = Callable[[Event], bool]


def for_object(event: Event) -> list[Key]:
    """Reconcile the object itself."""
    return [event.key]


def for_controller(owner: resources.Kind) -> Mapper:
    """Reconcile the controller owner (of kind ``owner``) of the object; for updates also the previous owner
    when the controller reference changed. Objects without such a controller map to nothing."""

    def owner_keys(obj: objects.Object) -> list[Key]:
        ref = owners.controller_of(obj)
        if ref is None or ref.get("kind") != owner.kind:
            return []
        if objects.group_of(str(ref.get("apiVersion", ""))) != owner.group:
            return []
        return [Key(objects.namespace_of(obj) if owner.namespaced else "", str(ref.get("name", "")))]

    def mapper(event: Event) -> list[Key]:
        keys = owner_keys(event.object)
        if event.old is not None:
            keys += [k for k in owner_keys(event.old) if k not in keys]
        return keys

    return mapper


def for_mapping(fn: Callable[[objects.Object], Iterable[Key]]) -> Mapper:
    """Reconcile whatever ``fn`` maps the object to (for updates: the union over old and new state)."""

    def mapper(event: Event) -> list[Key]:
        keys = list(dict.fromkeys(fn(event.object)))
        if event.old is not None:
            keys += [k for k in fn(event.old) if k not in keys]
        return keys

    return mapper


# --- predicates ------------------------------------------------------------------------------------------------


def always(event: Event) -> bool:
    return True


def generation_changed(event: Event) -> bool:
    """Creations, deletions, and updates that changed ``metadata.generation`` (i.e. the spec)."""
    if event.type != "MODIFIED" or event.old is None:
        return True
    return objects.generation_of(event.object) != objects.generation_of(event.old)


def annotation_changed(name: str) -> Predicate:
    def predicate(event: Event) -> bool:
        if event.type != "MODIFIED" or event.old is None:
            return True
        return objects.annotations_of(event.object).get(name) != objects.annotations_of(event.old).get(name)

    return predicate


def labels_changed(event: Event) -> bool:
    if event.type != "MODIFIED" or event.old is None:
        return True
    return objects.labels_of(event.object) != objects.labels_of(event.old)


def deleted(event: Event) -> bool:
    return event.type == "DELETED"


def any_of(*predicates: Predicate) -> Predicate:
    return lambda event: any(p(event) for p in predicates)


def all_of(*predicates: Predicate) -> Predicate:
    return lambda event: all(p(event) for p in predicates)


def negate(predicate: Predicate) -> Predicate:
    return lambda event: not predicate(event)
