"""A Stack's `gitAuth` end to end, against real servers: an `sshAuth` key with a passphrase, both read from the
Stack's Secret, over the test bed's real sshd (the operator resolves the branch with them, the agent clones with
them). A wrong passphrase is a clear status that names neither the key nor the passphrase, and the Stack recovers
once its Secret is right."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
import stack_e2e as e2e

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import gitserver, operator

pytestmark = [pytest.mark.controlplane, pytest.mark.pulumi]

PASSPHRASE = "ssh-PLANTED-passphrase-71c2"


def _key_with_passphrase(server: gitserver.GitServer, directory: Path) -> str:
    """A new ed25519 key protected by :data:`PASSPHRASE`, authorised on the server's sshd; its private PEM."""
    assert server.ssh is not None
    key = directory / "stack_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", PASSPHRASE, "-f", str(key)], check=True)
    authorized = server.ssh.private_key_path.parent / "authorized_keys"
    authorized.write_text(authorized.read_text() + key.with_suffix(".pub").read_text())
    return key.read_text()


def _secret_ref(key: str) -> dict[str, object]:
    return {"type": "Secret", "secret": {"name": "git-ssh", "key": key}}


async def test_a_stack_clones_over_ssh_with_a_passphrase_protected_key_from_its_secret(
    kc: kclient.Client, namespace: str, running_operator: operator.Operator, tmp_path: Path,
) -> None:
    with gitserver.running(tmp_path / "git", ssh=True) as server:
        private_key = _key_with_passphrase(server, tmp_path)
        payload = base64.b64decode("".join(private_key.strip().splitlines()[1:-1]))
        assert b"aes256-ctr" in payload[:64], "the key is not protected by a passphrase"
        commit = e2e.create_repo(server, "over-ssh", marker="over ssh")
        await kc.create(resources.SECRET.new("git-ssh", namespace, stringData={
            "key": private_key, "passphrase": "not-the-passphrase"}))
        await kc.create(e2e.git_stack("over-ssh", namespace, server.ssh_url("over-ssh"), branch="main", gitAuth={
            "sshAuth": {"sshPrivateKey": _secret_ref("key"), "password": _secret_ref("passphrase")}}))

        # A wrong passphrase: the Stack says so, and nothing of the key or of either passphrase shows.
        stuck = await e2e.wait_for(kc, resources.STACK, "over-ssh", namespace, lambda o: "SSH private key" in str(
            (o.get("status") or {}).get("conditions")), timeout=120)
        said = str(stuck["status"])
        assert "unable to decrypt the SSH private key with the given password" in said, said
        for planted in (PASSPHRASE, "not-the-passphrase", private_key.splitlines()[1]):
            assert planted not in said
            assert not [e for e in await e2e.events_of(kc, "over-ssh", namespace) if planted in e["message"]]
        assert "lastUpdate" not in stuck["status"]

        # The right passphrase: the operator resolves the branch over SSH, the agent clones it, the program runs.
        await kc.patch(resources.SECRET, "git-ssh", {"stringData": {"passphrase": PASSPHRASE}}, namespace)
        ready = await e2e.wait_for(kc, resources.STACK, "over-ssh", namespace, e2e.is_ready, timeout=240)
        assert e2e.last_update(ready)["lastSuccessfulCommit"] == commit
        assert ready["status"]["outputs"]["marker"] == "over ssh"
        assert "Accepted publickey" in server.ssh.log_path.read_text()
