"""The registry of kinds pko talks to, so other layers say ``kube.resource("Stack")`` and never spell URLs.

A :class:`Kind` names a resource (apiVersion, kind, plural, scope). Each kind gets a lightkube *generic*
resource class, which makes lightkube decode responses into plain dicts (see :mod:`pko.kube.objects`) for
built-in kinds as well as for our CRDs. These classes are deliberately **not** registered in lightkube's global
resource registry: pko must never change how lightkube decodes objects for anyone else in the process.

This module must never do I/O.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from lightkube import generic_resource
from lightkube.core import resource as lkresource

from pko.kube import objects

_VERBS = ["delete", "deletecollection", "get", "global_list", "global_watch", "list", "patch", "post", "put", "watch"]


@dataclasses.dataclass(frozen=True)
class Kind:
    """One served resource: ``Kind("pulumi.com/v1", "Stack", "stacks")``."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def group(self) -> str:
        return objects.group_of(self.api_version)

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def __str__(self) -> str:
        return f"{self.kind}.{self.api_version}"

    def matches(self, obj: objects.Object) -> bool:
        """True when ``obj`` is of this kind (same group and kind; any version of the group)."""
        api_version, kind = objects.gvk_of(obj)
        return kind == self.kind and objects.group_of(api_version) == self.group

    def new(self, name: str, namespace: str | None = None, **fields: Any) -> objects.Object:
        """A fresh object of this kind, e.g. for server-side apply: ``Kind.new("x", "ns", data={...})``."""
        meta: dict[str, Any] = {"name": name}
        if self.namespaced and namespace:
            meta["namespace"] = namespace
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": meta, **fields}


@functools.cache
def model(kind: Kind) -> Any:
    """The (unregistered) lightkube generic class for ``kind``; its instances are plain dicts."""
    info = lkresource.ApiInfo(
        resource=lkresource.ResourceDef(kind.group, kind.version, kind.kind), plural=kind.plural, verbs=_VERBS
    )
    status_info = lkresource.ApiInfo(
        resource=info.resource, parent=info.resource, plural=kind.plural, verbs=["get", "patch", "put"],
        action="status",
    )
    if kind.namespaced:
        base: type = generic_resource.GenericNamespacedResource
        status_base: type = generic_resource.GenericNamespacedStatus
    else:
        base = generic_resource.GenericGlobalResource
        status_base = generic_resource.GenericGlobalStatus
    status = type(f"{kind.kind}Status", (status_base,), {"_api_info": status_info})
    return type(kind.kind, (base,), {"_api_info": info, "Status": status})


# Kinds pko uses. CRDs first (their CRDs are built in pko.api), then the built-in kinds the controllers touch.
STACK = Kind("pulumi.com/v1", "Stack", "stacks")
PROGRAM = Kind("pulumi.com/v1", "Program", "programs")
WORKSPACE = Kind("auto.pulumi.com/v1alpha1", "Workspace", "workspaces")
UPDATE = Kind("auto.pulumi.com/v1alpha1", "Update", "updates")
STACK_APPROVAL = Kind("pulumi.com/v1alpha1", "StackApproval", "stackapprovals")  # pko (docs/approvals.md)
STACK_ROLLOUT = Kind("pulumi.com/v1alpha1", "StackRollout", "stackrollouts")  # pko (docs/rollouts.md)

CONFIG_MAP = Kind("v1", "ConfigMap", "configmaps")
SECRET = Kind("v1", "Secret", "secrets")
SERVICE = Kind("v1", "Service", "services")
SERVICE_ACCOUNT = Kind("v1", "ServiceAccount", "serviceaccounts")
POD = Kind("v1", "Pod", "pods")
EVENT = Kind("v1", "Event", "events")
NAMESPACE = Kind("v1", "Namespace", "namespaces", namespaced=False)
STATEFUL_SET = Kind("apps/v1", "StatefulSet", "statefulsets")
LEASE = Kind("coordination.k8s.io/v1", "Lease", "leases")
CUSTOM_RESOURCE_DEFINITION = Kind(
    "apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False
)

# Flux sources a Stack may reference (the Stack controller watches them lazily, per kind first seen).
GIT_REPOSITORY = Kind("source.toolkit.fluxcd.io/v1", "GitRepository", "gitrepositories")
OCI_REPOSITORY = Kind("source.toolkit.fluxcd.io/v1beta2", "OCIRepository", "ocirepositories")
BUCKET = Kind("source.toolkit.fluxcd.io/v1beta2", "Bucket", "buckets")

_REGISTRY: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Make ``kind`` known by its kind name and by ``"<Kind>.<group>"`` (a later registration wins)."""
    _REGISTRY[kind.kind] = kind
    _REGISTRY[f"{kind.kind}.{kind.group}" if kind.group else kind.kind] = kind
    _REGISTRY[f"{kind.api_version}/{kind.kind}"] = kind
    return kind


for _kind in (
    STACK, PROGRAM, WORKSPACE, UPDATE, STACK_APPROVAL, STACK_ROLLOUT, CONFIG_MAP, SECRET, SERVICE, SERVICE_ACCOUNT, POD,
    EVENT,
    NAMESPACE, STATEFUL_SET, LEASE, CUSTOM_RESOURCE_DEFINITION, GIT_REPOSITORY, OCI_REPOSITORY, BUCKET,
):
    register(_kind)


def resource(name: str | Kind) -> Kind:
    """Look a kind up: ``"Stack"``, ``"Stack.pulumi.com"`` or ``"pulumi.com/v1/Stack"``. Raises ``KeyError``."""
    if isinstance(name, Kind):
        return name
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown kind {name!r}; register it with pko.kube.register(Kind(...))") from None


def of(obj: objects.Object) -> Kind:
    """The registered kind of an object, by its ``apiVersion`` and ``kind``. Raises ``KeyError``."""
    api_version, kind = objects.gvk_of(obj)
    found = _REGISTRY.get(f"{api_version}/{kind}")
    if found is None:
        group = objects.group_of(api_version)
        candidate = _REGISTRY.get(f"{kind}.{group}" if group else kind)
        if candidate is None:
            raise KeyError(f"unknown kind {kind!r} of {api_version!r}")
        # Same group, other version: talk to the server in the object's own version.
        found = dataclasses.replace(candidate, api_version=api_version)
    return found
