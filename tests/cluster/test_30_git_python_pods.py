"""A Git-sourced Stack with a Python program in a workspace pod: the agent clones from the test git server at the
node's address with basic auth from a Secret, `pulumi install` makes the program's virtualenv inside the pod (from
the image's local wheelhouse: pods have no network beyond the cluster), and the official Python language host runs
it."""

from __future__ import annotations

from typing import Any

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import cluster, crossrun, gitserver
from pko.testing.clusterbed import Release, diagnose, passphrase_env, workspace_template
from pko.testing.waiting import condition, wait_for

PROJECT = crossrun.PYTHON_PROJECT  # pip, with a virtualenv `venv` that `pulumi install` makes in the pod
PROGRAM = """import sys
import pulumi

config = pulumi.Config()
pulumi.export("greeting", f"hello from {config.get('who') or 'python'}")
pulumi.export("python", sys.prefix)
"""


async def test_git_python_stack_with_basic_auth(ckc: kclient.Client, cnamespace: str, real_cluster: cluster.Cluster,
                                                operator_release: Release, pod_git: gitserver.GitServer) -> None:
    ns = cnamespace
    repo = f"py-{ns}"
    pod_git.create_repo(repo, {"Pulumi.yaml": PROJECT, "requirements.txt": "pulumi>=3.0.0,<4.0.0\n",
                               "__main__.py": PROGRAM})
    pod_git.protect(repo, "pko", "git-password")
    await ckc.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "git-creds", "namespace": ns},
                      "stringData": {"username": "pko", "password": "git-password"}})
    secret_ref: dict[str, Any] = {"type": "Secret", "secret": {"name": "git-creds"}}
    await ckc.create(resources.STACK.new("py", ns, spec={
        "stack": "dev", "projectRepo": pod_git.http_url(repo), "branch": "main", "backend": "file:///tmp",
        "envRefs": passphrase_env(), "config": {"who": "a workspace pod"}, "destroyOnFinalize": True,
        "gitAuth": {"basicAuth": {"userName": {**secret_ref, "secret": {"name": "git-creds", "key": "username"}},
                                  "password": {**secret_ref, "secret": {"name": "git-creds", "key": "password"}}}},
        "workspaceTemplate": workspace_template(),
    }))

    def ready(obj: dict[str, Any]) -> bool:
        return condition(obj, "Ready").get("status") == "True" and bool((obj.get("status") or {}).get("outputs"))

    try:
        stack = await wait_for(ckc, resources.STACK, "py", ns, ready, timeout=600)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnose(real_cluster, ns)}") from None
    outputs = stack["status"]["outputs"]
    assert outputs["greeting"] == "hello from a workspace pod"
    # the program ran in the virtualenv `pulumi install` created inside the pod's workspace
    assert outputs["python"].endswith("/venv"), outputs
    assert stack["status"]["projectInfo"] == {"name": "pyproj", "runtime": "python"}

    # a branch that does not exist: the Stack says so (no crash, no secret in its status)
    await ckc.patch(resources.STACK, "py", {"spec": {"branch": "does-not-exist"}}, ns)
    stack = await wait_for(ckc, resources.STACK, "py", ns,
                           lambda o: condition(o, "Ready").get("status") == "False", timeout=120)
    assert "git-password" not in str(stack["status"])
