"""Patch metadata: which lists merge, by which key, and which values are replaced whole.

Kubernetes keeps this in Go struct tags (``patchStrategy:"merge" patchMergeKey:"name"``); the Go operator's
``strategicpatch`` reads them by reflection. We keep a small hand-written table instead, covering the shapes the
operator merges: ``PodTemplateSpec``/``PodSpec``/``Container`` (workspace pods), ``Workspace`` and ``Update``
(``workspaceTemplate`` / ``updateTemplate`` of a Stack). A field missing from a table behaves as an untagged Go
field: maps merge recursively, lists are replaced atomically.

The entries follow ``k8s.io/api/core/v1/types.go`` and ``operator/api/auto/v1alpha1``. This module is data only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Field:
    """How one field merges.

    ``merge`` — for lists: merge instead of replacing (by ``merge_key`` for lists of maps, as a set otherwise).
    ``replace`` — for maps: the patch replaces the original instead of merging into it.
    ``schema`` — the fields of the value (a map) or of the list items.
    """

    merge: bool = False
    merge_key: str | None = None
    replace: bool = False
    schema: Mapping[str, Field] = dataclasses.field(default_factory=dict)


Schema = Mapping[str, Field]

DEFAULT = Field()


def keyed(merge_key: str, schema: Schema | None = None) -> Field:
    """A list of maps merged item by item on ``merge_key``."""
    return Field(merge=True, merge_key=merge_key, schema=schema or {})


def struct(schema: Schema) -> Field:
    """A map whose own fields have patch metadata."""
    return Field(schema=schema)


SET = Field(merge=True)
"""A list of scalars merged as a set (``metadata.finalizers``)."""

OBJECT_META: Schema = {
    "finalizers": SET,
    "ownerReferences": keyed("uid"),
}

CONTAINER: Schema = {
    "ports": keyed("containerPort"),
    "env": keyed("name"),
    "volumeMounts": keyed("mountPath"),
    "volumeDevices": keyed("devicePath"),
}

POD_SPEC: Schema = {
    "volumes": keyed("name"),
    "initContainers": keyed("name", CONTAINER),
    "containers": keyed("name", CONTAINER),
    "ephemeralContainers": keyed("name", CONTAINER),
    "imagePullSecrets": keyed("name"),
    "hostAliases": keyed("ip"),
    "topologySpreadConstraints": keyed("topologyKey"),
    "resourceClaims": keyed("name"),
    "schedulingGates": keyed("name"),
    # Atomic in Kubernetes too, listed for the reader: tolerations, readinessGates, securityContext.sysctls, ...
    "tolerations": DEFAULT,
}

POD_TEMPLATE_SPEC: Schema = {
    "metadata": struct(OBJECT_META),
    "spec": struct(POD_SPEC),
}

CONDITIONS = keyed("type")

WORKSPACE_SPEC: Schema = {
    "env": keyed("name"),
    "podTemplate": struct(POD_TEMPLATE_SPEC),
    # `stacks` (and each stack's `config`) carry +patchStrategy markers for the CRD but no Go struct tag, so the
    # Go operator's strategic merge replaces them whole. So do we.
    "stacks": DEFAULT,
}

WORKSPACE: Schema = {
    "metadata": struct(OBJECT_META),
    "spec": struct(WORKSPACE_SPEC),
    "status": struct({"conditions": CONDITIONS}),
}

UPDATE: Schema = {
    "metadata": struct(OBJECT_META),
    "status": struct({"conditions": CONDITIONS}),
}

POD: Schema = {
    "metadata": struct(OBJECT_META),
    "spec": struct(POD_SPEC),
}

STATEFUL_SET: Schema = {
    "metadata": struct(OBJECT_META),
    "spec": struct({"template": struct(POD_TEMPLATE_SPEC)}),
}
