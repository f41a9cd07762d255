"""Finding a cluster the way kubectl does, for pko's command-line tools (`kubectl pko`).

kubectl's order: `--kubeconfig`, else every file of `$KUBECONFIG` (a path list, merged: the first file to name a
cluster, context, user or `current-context` wins), else `~/.kube/config`, else the in-cluster service account;
`--context` picks a context. The namespace defaults to the context's. lightkube alone tries in-cluster first and
reads a single `$KUBECONFIG` file, which is not what a user at a terminal expects.

:func:`merge` is pure; :func:`load` reads files. This module must never talk to the API server.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightkube
import yaml
from lightkube.core import exceptions as lkexceptions

from pko.kube import client as kclient

DEFAULT_NAMESPACE = "default"


class ConfigError(Exception):
    """No usable configuration: the message says what is missing."""


def merge(documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """kubectl's merge of several kubeconfig documents: named entries and `current-context` from the first
    document that has them."""
    merged: dict[str, Any] = {"clusters": [], "contexts": [], "users": []}
    for doc in documents:
        if "current-context" not in merged and doc.get("current-context"):
            merged["current-context"] = doc["current-context"]
        for section in ("clusters", "contexts", "users"):
            seen = {entry.get("name") for entry in merged[section]}
            merged[section] += [entry for entry in doc.get(section) or () if entry.get("name") not in seen]
    return merged


def _files(kubeconfig: str | None, env: Mapping[str, str]) -> list[Path]:
    if kubeconfig:
        return [Path(kubeconfig)]
    listed = [Path(p) for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return [p for p in listed if p.exists()]
    default = Path(env.get("HOME", "~")).expanduser() / ".kube" / "config"
    return [default] if default.exists() else []


def load(kubeconfig: str | None = None, context: str | None = None, *, env: Mapping[str, str] | None = None,
         timeout: float = 30.0) -> tuple[kclient.Client, str]:
    """A client for the chosen cluster and the context's namespace. Raises :class:`ConfigError`."""
    env = os.environ if env is None else env
    files = _files(kubeconfig, env)
    try:
        if files:
            documents = []
            for path in files:
                try:
                    documents.append(yaml.safe_load(path.read_text()) or {})
                except OSError as err:
                    raise ConfigError(f"cannot read kubeconfig {path}: {err.strerror}") from err
            config = lightkube.KubeConfig.from_dict(merge(documents), fname=files[0])
            single = config.get(context_name=context)
        else:
            if context:
                raise ConfigError(f"context {context!r} not found: no kubeconfig file")
            single = lightkube.KubeConfig.from_service_account().get()
    except lkexceptions.ConfigError as err:
        raise ConfigError(str(err) if files else
                          "no configuration: set --kubeconfig or KUBECONFIG, or run in a pod") from err
    if single is None:
        raise ConfigError("no current context: set --context")
    return kclient.Client.connect(single, timeout=timeout), single.namespace or DEFAULT_NAMESPACE
