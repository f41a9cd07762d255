"""A revision names a commit through the remote's refs: SHA, branch, tag (peeled) or full ref name."""

from __future__ import annotations

from pko.sources import git

A, B, C, T = (c * 40 for c in "abcd")
REFS: dict[bytes, bytes | None] = {
    b"HEAD": A.encode(), b"refs/heads/main": A.encode(), b"refs/heads/feature": B.encode(),
    b"refs/tags/v1": T.encode(), b"refs/tags/v1^{}": C.encode(),
}


def test_resolve() -> None:
    assert git.resolve(REFS, "main") == A.encode()
    assert git.resolve(REFS, "refs/heads/feature") == B.encode()
    assert git.resolve(REFS, "v1") == C.encode()  # annotated tag peeled to its commit
    assert git.resolve(REFS, "e" * 40) == ("e" * 40).encode()  # an unadvertised commit is asked for by id
    assert git.resolve(REFS, "E" * 40) == ("e" * 40).encode()
    assert git.resolve(REFS, "bbbbbbb") == B.encode()
    assert git.resolve(REFS, "nope") is None


def test_auth_from_env_and_repr_hides_secrets() -> None:
    auth = git.GitAuth.from_env({"GIT_USERNAME": "u", "GIT_PASSWORD": "hunter2", "GIT_TOKEN": "",
                                 "GIT_SSH_PRIVATE_KEY": "-----BEGIN OPENSSH PRIVATE KEY-----"})
    assert (auth.username, auth.password) == ("u", "hunter2")
    assert "hunter2" not in repr(auth)
    assert "BEGIN" not in repr(auth)


def test_redact() -> None:
    assert git.redact("https://u:p@host/r.git") == "https://u@host/r.git"
    assert git.redact("ssh://git@host/r.git") == "ssh://git@host/r.git"
