"""Which cluster, context and namespace `kubectl pko` uses: kubectl's rules (`--kubeconfig`, the merged
`$KUBECONFIG` list, `~/.kube/config`, in-cluster), no API call made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pko.kube import kubeconfig


def doc(name: str, server: str, namespace: str | None = None, current: bool = True) -> dict[str, Any]:
    context: dict[str, Any] = {"cluster": name, "user": name}
    if namespace:
        context["namespace"] = namespace
    out: dict[str, Any] = {
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "contexts": [{"name": name, "context": context}],
        "users": [{"name": name, "user": {"token": "t"}}],
    }
    if current:
        out["current-context"] = name
    return out


def test_merge_first_wins() -> None:
    first = doc("a", "https://a:6443", current=False)
    second = {**doc("b", "https://b:6443"), "clusters": [{"name": "a", "cluster": {"server": "https://other"}},
                                                         {"name": "b", "cluster": {"server": "https://b:6443"}}]}
    merged = kubeconfig.merge([first, second])
    assert merged["current-context"] == "b"
    assert [c["cluster"]["server"] for c in merged["clusters"]] == ["https://a:6443", "https://b:6443"]


async def test_load_follows_kubeconfig_list_and_context(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(yaml.safe_dump(doc("a", "https://a:6443", "team-a", current=False)))
    b.write_text(yaml.safe_dump(doc("b", "https://b:6443")))
    env = {"KUBECONFIG": f"{a}:{tmp_path / 'missing'}:{b}", "HOME": str(tmp_path)}
    client, namespace = kubeconfig.load(env=env)
    await client.close()
    assert namespace == "default"  # context b (current) has none
    client, namespace = kubeconfig.load(context="a", env=env)
    await client.close()
    assert namespace == "team-a"
    client, namespace = kubeconfig.load(str(a), "a", env={})  # --kubeconfig beats the list
    await client.close()
    assert namespace == "team-a"


def test_load_says_what_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump(doc("a", "https://a:6443")))
    with pytest.raises(kubeconfig.ConfigError, match="nope"):
        kubeconfig.load(str(path), "nope", env={})
    with pytest.raises(kubeconfig.ConfigError, match="cannot read kubeconfig"):
        kubeconfig.load(str(tmp_path / "absent"), env={})
