"""End to end: a Program's artifact, fetched the way a workspace fetches it (download, digest check, safe untar),
is a Pulumi YAML project the real Pulumi CLI runs — configuration defaults and values, variables, outputs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from program_testlib import Running, eventually
from pulumi import automation as auto

from pko.kube import client as kclient
from pko.kube import resources
from pko.sources import flux

PROGRAM: dict[str, Any] = {
    "configuration": {
        "greeting": {"type": "String"},
        "count": {"type": "Number", "default": 3},
        "names": {"type": "List<String>", "default": ["ada", "grace"]},
    },
    "variables": {
        "message": "${greeting}, world",
        "joined": {"fn::join": [" & ", "${names}"]},
    },
    "outputs": {
        "message": "${message}",
        "count": "${count}",
        "joined": "${joined}",
        "literal": {"nested": [1, "two", True]},
    },
}


async def test_pulumi_up_runs_the_served_program(kc: kclient.Client, namespace: str, controller: Running,
                                                 tmp_path: Path, pulumi_env: dict[str, str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in pulumi_env.items():  # the Automation API finds `pulumi` through this process's environment
        monkeypatch.setenv(key, value)
    await kc.create(resources.PROGRAM.new("greeter", namespace, program=PROGRAM))
    artifact: dict[str, Any] = {}

    async def published() -> bool:
        obj = await kc.get(resources.PROGRAM, "greeter", namespace)
        artifact.update((obj.get("status") or {}).get("artifact") or {})
        return bool(artifact)

    await eventually(published, "the Program's artifact")

    work_dir = tmp_path / "source"
    await asyncio.to_thread(flux.fetch, artifact["url"], artifact["digest"], work_dir)
    assert sorted(p.name for p in work_dir.iterdir()) == ["Pulumi.yaml"]

    def up() -> tuple[auto.UpResult, auto.DestroyResult]:
        stack = auto.Stack.create("dev", auto.LocalWorkspace(work_dir=str(work_dir), env_vars=pulumi_env))
        stack.set_config("greeting", auto.ConfigValue("hello"))
        result = stack.up()
        return result, stack.destroy()

    result, destroyed = await asyncio.to_thread(up)
    assert result.summary.result == "succeeded"
    outputs = {key: value.value for key, value in result.outputs.items()}
    assert outputs == {
        "message": "hello, world",
        "count": 3,
        "joined": "ada & grace",
        "literal": {"nested": [1, "two", True]},
    }
    assert destroyed.summary.result == "succeeded"


async def test_a_tampered_digest_is_refused(kc: kclient.Client, namespace: str, controller: Running,
                                            tmp_path: Path) -> None:
    await kc.create(resources.PROGRAM.new("checked", namespace, program={"outputs": {"x": 1}}))
    artifact: dict[str, Any] = {}

    async def published() -> bool:
        obj = await kc.get(resources.PROGRAM, "checked", namespace)
        artifact.update((obj.get("status") or {}).get("artifact") or {})
        return bool(artifact)

    await eventually(published, "the Program's artifact")
    wrong = "sha256:" + "0" * 64
    with pytest.raises(flux.FetchError, match="digest"):
        await asyncio.to_thread(flux.fetch, artifact["url"], wrong, tmp_path / "source")
    await asyncio.to_thread(flux.fetch, artifact["url"], artifact["digest"], tmp_path / "source")
    assert (tmp_path / "source" / "Pulumi.yaml").is_file()
