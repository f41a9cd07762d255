"""Owner references: building them, finding an object's controller, setting them without duplicates.

The Stack owns its Workspace and Updates, the Workspace owns its StatefulSet and Service, the Update owns its
outputs Secret; garbage collection and the controllers' "owned object changed → reconcile the owner" both rest
on these references, so they are built in exactly one place.

Pure functions over plain-dict objects (an owner may also be its typed model). They never do I/O and never
mutate their arguments (they return copies).
"""

from __future__ import annotations

from typing import Any

from pko.kube import objects


class AlreadyOwned(ValueError):
    """The object already has a different controller; Kubernetes allows only one."""


def owner_reference(
    owner: objects.Like, *, controller: bool = False, block_owner_deletion: bool = False
) -> dict[str, Any]:
    """An ``ownerReferences`` entry pointing at ``owner`` (which must carry apiVersion, kind, name and uid)."""
    owner = objects.identity(owner)
    api_version, kind = objects.gvk_of(owner)
    name, uid = objects.name_of(owner), objects.uid_of(owner)
    if not (api_version and kind and name and uid):
        raise ValueError(f"owner needs apiVersion, kind, metadata.name and metadata.uid, got {kind}/{name} {uid!r}")
    ref: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}
    if controller:
        ref["controller"] = True
    if block_owner_deletion:
        ref["blockOwnerDeletion"] = True
    return ref


def controller_reference(owner: objects.Like) -> dict[str, Any]:
    """The controller reference controller-runtime writes: ``controller: true, blockOwnerDeletion: true``."""
    return owner_reference(owner, controller=True, block_owner_deletion=True)


def references_of(obj: objects.Object) -> list[dict[str, Any]]:
    refs = objects.metadata(obj).get("ownerReferences") or []
    return [ref for ref in refs if isinstance(ref, dict)]


def controller_of(obj: objects.Object) -> dict[str, Any] | None:
    """The owner reference marked ``controller: true``, if any."""
    for ref in references_of(obj):
        if ref.get("controller"):
            return ref
    return None


def _same_owner(ref: dict[str, Any], other: dict[str, Any]) -> bool:
    """Same object: same group, kind and name (the version may differ; a recreated owner keeps its name)."""
    return (
        objects.group_of(str(ref.get("apiVersion", ""))) == objects.group_of(str(other.get("apiVersion", "")))
        and ref.get("kind") == other.get("kind")
        and ref.get("name") == other.get("name")
    )


def is_controlled_by(obj: objects.Object, owner: objects.Object) -> bool:
    """True when ``owner`` (matched by uid) is the controller of ``obj``."""
    ref = controller_of(obj)
    return ref is not None and ref.get("uid") == objects.uid_of(owner)


def is_owned_by(obj: objects.Object, owner: objects.Object) -> bool:
    """True when any owner reference of ``obj`` points at ``owner`` (matched by uid)."""
    uid = objects.uid_of(owner)
    return any(ref.get("uid") == uid for ref in references_of(obj))


def _with_reference(obj: objects.Object, ref: dict[str, Any]) -> objects.Object:
    result = objects.clone(obj)
    meta = result.setdefault("metadata", {})
    refs = [r for r in (meta.get("ownerReferences") or []) if not _same_owner(r, ref)]
    # Keep the position of a reference being replaced, so re-setting it is a no-op for server-side apply.
    old = references_of(obj)
    index = next((i for i, r in enumerate(old) if _same_owner(r, ref)), len(refs))
    refs.insert(index, ref)
    meta["ownerReferences"] = refs
    return result


def set_controller_reference(obj: objects.Object, owner: objects.Like) -> objects.Object:
    """A copy of ``obj`` controlled by ``owner``. Raises :class:`AlreadyOwned` if another object controls it."""
    ref = controller_reference(owner)
    current = controller_of(obj)
    if current is not None and not _same_owner(current, ref):
        raise AlreadyOwned(
            f"{objects.key_of(obj)} is already controlled by {current.get('kind')} {current.get('name')}"
        )
    return _with_reference(obj, ref)


def set_owner_reference(
    obj: objects.Object, owner: objects.Like, *, block_owner_deletion: bool = False
) -> objects.Object:
    """A copy of ``obj`` with a non-controller reference to ``owner`` (replacing any earlier one to it)."""
    return _with_reference(obj, owner_reference(owner, block_owner_deletion=block_owner_deletion))


def remove_owner_reference(obj: objects.Object, owner: objects.Object) -> objects.Object:
    """A copy of ``obj`` without references to ``owner``."""
    result = objects.clone(obj)
    meta = result.setdefault("metadata", {})
    target = {"apiVersion": owner.get("apiVersion"), "kind": owner.get("kind"), "name": objects.name_of(owner)}
    meta["ownerReferences"] = [r for r in references_of(obj) if not _same_owner(r, target)]
    return result
