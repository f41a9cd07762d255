"""Programs on the real API server: the controller publishes an artifact, the file server serves exactly that
artifact for the current generation only, and a replica that does not run the controller serves it too."""

from __future__ import annotations

import hashlib
import io
import tarfile
from typing import Any

import httpx
import yaml
from program_testlib import Running, eventually, running

from pko.api import names
from pko.kube import client as kclient
from pko.kube import resources


def _program(namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    return resources.PROGRAM.new(name, namespace, program=body)


async def _artifact_at(kc: kclient.Client, namespace: str, name: str, generation: int) -> dict[str, Any]:
    """The status artifact once the controller has observed ``generation``."""
    found: dict[str, Any] = {}

    async def observed() -> bool:
        obj = await kc.get(resources.PROGRAM, name, namespace)
        status = obj.get("status") or {}
        if status.get("observedGeneration") == generation and status.get("artifact"):
            found.update(obj)
            return True
        return False

    await eventually(observed, f"Program {namespace}/{name} status for generation {generation}")
    artifact: dict[str, Any] = found["status"]["artifact"]
    return artifact


def _pulumi_yaml(data: bytes) -> dict[str, Any]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        [member] = tar.getmembers()
        assert member.name == "Pulumi.yaml"
        assert member.mode == 0o775
        content = tar.extractfile(member)
        assert content is not None
        loaded: dict[str, Any] = yaml.safe_load(content.read())
        return loaded


async def test_program_lifecycle_through_the_file_server(kc: kclient.Client, namespace: str,
                                                         controller: Running) -> None:
    advertised = await controller.programs.server.advertised()
    created = await kc.create(_program(namespace, "hello", {
        "variables": {"who": "world"},
        "outputs": {"greeting": "hello ${who}"},
    }))
    assert created["metadata"]["generation"] == 1

    artifact = await _artifact_at(kc, namespace, "hello", 1)
    assert artifact["url"] == f"http://{advertised}/programs/{namespace}/hello/1"
    assert artifact["path"] == f"programs/{namespace}/hello/1.tar.gz"
    assert artifact["revision"] == "1"
    assert artifact["lastUpdateTime"].endswith("Z")
    obj = await kc.get(resources.PROGRAM, "hello", namespace)
    managers = {m["manager"]: m.get("subresource") for m in obj["metadata"]["managedFields"]}
    assert managers[names.FIELD_MANAGER_PROGRAM_STATUS] == "status"

    async with httpx.AsyncClient(timeout=30) as http:
        first = await http.get(artifact["url"])
        assert first.status_code == 200
        assert first.headers["content-type"] == "application/gzip"
        assert first.headers["content-disposition"] == "attachment; filename=project.tar.gz"
        assert "sha256:" + hashlib.sha256(first.content).hexdigest() == artifact["digest"]
        assert len(first.content) == artifact["size"]
        assert _pulumi_yaml(first.content) == {
            "name": "hello", "runtime": "yaml",
            "variables": {"who": "world"}, "outputs": {"greeting": "hello ${who}"},
        }
        again = await http.get(artifact["url"])
        assert again.content == first.content  # regenerated per request, byte for byte

        edited = await kc.patch(resources.PROGRAM, "hello", {"program": {"variables": {"who": "pulumi"}}}, namespace)
        assert edited["metadata"]["generation"] == 2
        second = await _artifact_at(kc, namespace, "hello", 2)
        assert second["url"] == f"http://{advertised}/programs/{namespace}/hello/2"
        assert second["digest"] != artifact["digest"]
        old = await http.get(artifact["url"])
        assert old.status_code == 404
        assert "does not match requested generation 1" in old.text
        new = await http.get(second["url"])
        assert new.status_code == 200
        assert "sha256:" + hashlib.sha256(new.content).hexdigest() == second["digest"]
        assert _pulumi_yaml(new.content)["variables"] == {"who": "pulumi"}

        assert (await http.get(f"http://{advertised}/programs/{namespace}/hello")).status_code == 400
        assert (await http.get(f"http://{advertised}/programs/{namespace}/absent/1")).status_code == 404
        assert (await http.post(second["url"])).status_code == 405

        await kc.delete(resources.PROGRAM, "hello", namespace)

        async def gone() -> bool:
            return (await http.get(second["url"])).status_code == 404

        await eventually(gone, "the deleted Program's URL to answer 404")


async def test_programs_active_counts_programs(kc: kclient.Client, namespace: str, controller: Running) -> None:
    await eventually(lambda: controller.sample("programs_active") == 0, "programs_active == 0")
    for name in ("one", "two"):
        await kc.create(_program(namespace, name, {"outputs": {"name": name}}))
    await eventually(lambda: controller.sample("programs_active") == 2, "programs_active == 2")
    await kc.delete(resources.PROGRAM, "one", namespace)
    await eventually(lambda: controller.sample("programs_active") == 1, "programs_active == 1")


async def test_current_status_is_not_rewritten_by_a_restarted_controller(kc: kclient.Client, namespace: str) -> None:
    async with running(kc, namespace, advertised="pko.example:9090"):
        await kc.create(_program(namespace, "stable", {"outputs": {"x": 1}}))
        await _artifact_at(kc, namespace, "stable", 1)
    before = await kc.get(resources.PROGRAM, "stable", namespace)

    async with running(kc, namespace, advertised="pko.example:9090") as restarted:
        labels = {"controller": names.PROGRAM_CONTROLLER, "result": "success"}
        await eventually(lambda: (restarted.sample("controller_runtime_reconcile_total", labels) or 0) >= 1,
                         "the restarted controller to reconcile the Program")
    after = await kc.get(resources.PROGRAM, "stable", namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

    async with running(kc, namespace, advertised="pko-moved.example:9090"):

        async def url_moved() -> bool:
            obj = await kc.get(resources.PROGRAM, "stable", namespace)
            return str(obj["status"]["artifact"]["url"]).startswith("http://pko-moved.example:9090/")

        await eventually(url_moved, "the artifact URL to follow the advertised address")
    moved = await kc.get(resources.PROGRAM, "stable", namespace)
    assert moved["status"]["artifact"]["digest"] == before["status"]["artifact"]["digest"]


async def test_a_replica_without_running_controllers_serves_programs(kc: kclient.Client, namespace: str,
                                                                     controller: Running) -> None:
    await kc.create(_program(namespace, "shared", {"outputs": {"answer": 42}}))
    artifact = await _artifact_at(kc, namespace, "shared", 1)
    async with running(kc, namespace, run_manager=False) as standby, httpx.AsyncClient(timeout=30) as http:
        standby_address = await standby.programs.server.advertised()
        served = await http.get(f"http://{standby_address}/programs/{namespace}/shared/1")
        assert served.status_code == 200
        assert "sha256:" + hashlib.sha256(served.content).hexdigest() == artifact["digest"]
        missing = await http.get(f"http://{standby_address}/programs/{namespace}/shared/2")
        assert missing.status_code == 404
