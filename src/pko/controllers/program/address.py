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

DEFAULT_LISTEN = ":9090"
ENV_LISTEN = "PROGRAM_FS_ADDR"
ENV_ADVERTISED = "PROGRAM_FS_ADV_ADDR"


def split_host_port(address: str) -> tuple[str, str]:
    """Go's ``net.SplitHostPort``: ``":9090"`` → ``("", "9090")``, ``"[::1]:80"`` → ``("::1", "80")``."""
    if address.startswith("["):
        close = address.find("]")
        if close < 0 or not address[close + 1:].startswith(":"):
            raise ValueError(f"address {address!r}: missing port in address")
        host, port = address[1:close], address[close + 2:]
    else:
        host, sep, port = address.rpartition(":")
        if not sep:
            raise ValueError(f"address {address!r}: missing port in address")
        if ":" in host:
            raise ValueError(f"address {address!r}: too many colons in address")
    if "[" in port or "]" in port:
        raise ValueError(f"address {address!r}: unexpected bracket")
    return host, port


def join_host_port(host: str, port: str) -> str:
    """Go's ``net.JoinHostPort``: brackets around IPv6 hosts."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listen_address(flag: str | None, env: Mapping[str, str]) -> str:
    """``--program-fs-addr``, else ``$PROGRAM_FS_ADDR``, else ``:9090``."""
    return flag or env.get(ENV_LISTEN) or DEFAULT_LISTEN


def bind_address(listen: str) -> tuple[str | None, int]:
    """Host (``None``: every interface) and port to bind for a listen address."""
    host, port = split_host_port(listen)
    if not port.isdigit():
        raise ValueError(f"address {listen!r}: invalid port")
    return (host or None), int(port)


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
    host, port = split_host_port(listen)
    if host == "":
        host = "localhost"
    elif host == "0.0.0.0":
        host = env.get("HOSTNAME") or hostname()
    return join_host_port(host, port)
