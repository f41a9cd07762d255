"""Where the program file server listens, and the address it advertises in ``status.artifact.url``.

Why: workspaces download Program artifacts from the URL in the Program's status, so the advertised address must
be reachable from a workspace pod while the listen address is often ``:9090`` (all interfaces). The rules are
the Go operator's: ``--program-fs-adv-addr`` (``$PROGRAM_FS_ADV_ADDR``) wins; otherwise the listen address with
an empty host becomes ``localhost`` and ``0.0.0.0`` becomes ``$HOSTNAME`` (the pod name, resolvable through the
operator's headless service), falling back to the machine's host name.

Pure: the environment and host name come in as arguments. Must never bind sockets or read ``os.environ``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pko.runtime import httpserver

DEFAULT_LISTEN = ":9090"
ENV_LISTEN = "PROGRAM_FS_ADDR"
ENV_ADVERTISED = "PROGRAM_FS_ADV_ADDR"


def listen_address(flag: str | None, env: Mapping[str, str]) -> str:
    """``--program-fs-addr``, else ``$PROGRAM_FS_ADDR``, else ``:9090``."""
    return flag or env.get(ENV_LISTEN) or DEFAULT_LISTEN


def advertised_address(
    listen: str,
    explicit: str | None,
    env: Mapping[str, str],
    hostname: Callable[[], str],
) -> str:
    """The address to advertise (``host:port``, or whatever URL base the user gave explicitly)."""
    chosen = explicit or env.get(ENV_ADVERTISED)
    if chosen:
        return chosen
    host, port = httpserver.split_host_port(listen)
    if host == "":
        host = "localhost"
    elif host == "0.0.0.0":
        host = env.get("HOSTNAME") or hostname()
    return httpserver.join_host_port(host, port)
