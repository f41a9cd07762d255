"""Typed builders for the built-in objects the operator writes: Service, Secret and StatefulSet.

Why: the controllers used to spell these as dict literals, where a misspelt field (``podManagmentPolicy``) is
silently sent and ignored. Here each is built from lightkube's typed models (which stay inside this layer) and
handed back as the plain dict every other part of :mod:`pko.kube` works with, so a reconcile still holds one
representation per object.

The StatefulSet's pod template is the exception: it is strategic-merged with the user's ``podTemplate``, which
may hold any field the API server knows, so it is passed through as given rather than narrowed to a model.

Pure: models in, dicts out. Must never do I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightkube.models.apps_v1 import StatefulSetSpec
from lightkube.models.core_v1 import PodTemplateSpec, ServicePort, ServiceSpec
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.core_v1 import Secret, Service

from pko.kube import objects


def _meta(name: str, namespace: str | None, labels: Mapping[str, str] | None,
          annotations: Mapping[str, str] | None) -> ObjectMeta:
    return ObjectMeta(name=name, namespace=namespace, labels=dict(labels) if labels is not None else None,
                      annotations=dict(annotations) if annotations else None)


def headless_service(*, name: str, namespace: str | None, labels: Mapping[str, str],
                     annotations: Mapping[str, str] | None, selector: Mapping[str, str],
                     ports: Sequence[tuple[str, int]]) -> objects.Object:
    """A Service without a cluster IP (``clusterIP: None``): DNS names for the pods `selector` picks."""
    model = Service(
        metadata=_meta(name, namespace, labels, annotations),
        spec=ServiceSpec(clusterIP="None", selector=dict(selector),
                         ports=[ServicePort(name=port_name, port=port) for port_name, port in ports]),
    )
    return dict(model.to_dict())


def secret(*, name: str, namespace: str | None, labels: Mapping[str, str], annotations: Mapping[str, str] | None,
           data: Mapping[str, str], immutable: bool = False, type_: str = "Opaque") -> objects.Object:
    """A Secret with base64 `data`."""
    model = Secret(metadata=_meta(name, namespace, labels, annotations), data=dict(data), immutable=immutable,
                   type=type_)
    return dict(model.to_dict())


def statefulset(*, name: str, namespace: str | None, labels: Mapping[str, str], selector: Mapping[str, str],
                service_name: str, replicas: int, pod_management_policy: str,
                template: Mapping[str, Any], claims: Sequence[Mapping[str, Any]] = ()) -> objects.Object:
    """A StatefulSet whose pod template is `template`, as given (see the module docstring); with `claims`, its
    volumeClaimTemplates, kept while it is scaled down and deleted with it."""
    model = StatefulSet(
        metadata=_meta(name, namespace, labels, None),
        spec=StatefulSetSpec(selector=LabelSelector(matchLabels=dict(selector)), serviceName=service_name,
                             replicas=replicas, podManagementPolicy=pod_management_policy,
                             template=PodTemplateSpec()),
    )
    built: objects.Object = dict(model.to_dict())
    built["spec"]["template"] = dict(template)
    if claims:
        built["spec"]["volumeClaimTemplates"] = [dict(claim) for claim in claims]
        built["spec"]["persistentVolumeClaimRetentionPolicy"] = {"whenDeleted": "Delete", "whenScaled": "Retain"}
    return built
