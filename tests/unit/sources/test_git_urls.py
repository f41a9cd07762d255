"""Only remote repositories over known transports are accepted: no local path, remote helper or option."""

from __future__ import annotations

import pytest

from pko.sources import git

ACCEPTED = [
    "https://github.com/pulumi/examples.git",
    "http://127.0.0.1:8080/repo.git",
    "ssh://git@github.com/pulumi/examples.git",
    "git://127.0.0.1:9418/repo.git",
    "git+ssh://git@host/repo",
    "git@github.com:pulumi/examples.git",
    "github.com:pulumi/examples.git",
    "https://user:secret@host/repo.git",
]

REFUSED = {
    "ext-helper": ("ext::sh -c touch% /tmp/pwned", "remote helpers"),
    "fd-helper": ("fd::17", "remote helpers"),
    "file-url": ("file:///etc", "scheme 'file'"),
    "local-path": ("/var/lib/repos/secret.git", "local paths"),
    "relative-path": ("../repo", "local paths"),
    "dash-option": ("--upload-pack=touch /tmp/pwned", "starts with '-'"),
    "dash-host-ssh": ("ssh://-oProxyCommand=touch%20/tmp/pwned/repo", "starting with '-'"),
    "dash-host-scp": ("-oProxyCommand=x:repo", "starts with '-'"),
    "newline": ("https://host/repo\n--upload-pack=x", "control characters"),
    "empty": ("", "empty"),
    "unknown-scheme": ("ftp://host/repo", "scheme 'ftp'"),
    "no-host": ("https:///repo", "no host"),
}


@pytest.mark.parametrize("url", ACCEPTED)
def test_remote_urls_are_accepted(url: str) -> None:
    git.check_url(url)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_hostile_urls_are_refused_with_a_precise_message(case: str) -> None:
    url, why = REFUSED[case]
    with pytest.raises(git.UnsupportedURLError, match="unsupported git repository URL") as caught:
        git.check_url(url)
    assert why in str(caught.value)


def test_the_message_never_shows_a_password() -> None:
    with pytest.raises(git.UnsupportedURLError) as caught:
        git.check_url("ftp://user:hunter2@host/repo")
    assert "hunter2" not in str(caught.value)


def test_checkout_refuses_before_touching_anything(tmp_path: object) -> None:
    from pathlib import Path

    target = Path(str(tmp_path)) / "out"
    with pytest.raises(git.UnsupportedURLError):
        git.checkout("ext::sh -c 'touch pwned'", "main", target)
    assert not target.exists()


@pytest.mark.parametrize("url", ["file:///srv/repo", "/srv/repo.git", "../repo"])
def test_the_agent_may_clone_a_repository_on_its_pods_disk(url: str) -> None:
    git.check_url(url, allow_local=True)  # accepted, as the Go agent accepts it


@pytest.mark.parametrize("url", ["ext::sh -c touch% /tmp/pwned", "--upload-pack=touch /tmp/pwned", "ssh://-oProxyCommand=x/r"])
def test_allowing_local_repositories_still_refuses_helpers_and_options(url: str) -> None:
    with pytest.raises(git.UnsupportedURLError):
        git.check_url(url, allow_local=True)
