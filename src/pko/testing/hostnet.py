"""The host's network as the real test cluster sees it, and the egress guard that keeps the cluster on this machine.

Pods (10.88.0.0/16) and Services (10.96.0.0/24) are addresses we invent on this machine; a packet for them, or for
any other private range, must never leave it. Before the cluster starts, :func:`install_guard` drops everything
pods forward out of the uplink and every host packet for a private range (except the host's own DNS resolver, which
the machine needs for its package registries), and routes the Service range into an empty bridge so a ClusterIP
that kube-proxy has not programmed yet dies here instead of following the default route. The rules live in the
`mangle` table, which is traversed before `filter`, so nothing kube-proxy or kubelet prepends there can get in
front of them.

:func:`sweep` removes the guard and everything the node leaves in the kernel (the CNI bridge, the KUBE-* and CNI-*
chains, pod network namespaces); it is idempotent and also runs before a start, so a run killed with SIGKILL leaves
nothing that the next run inherits. The rule lists are built by pure functions (unit-tested); the `ip` and
`iptables` calls that apply them are the thin part.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import shlex
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
GUARD_CHAIN = "PKO-EGRESS"
FORWARD_GUARD_CHAIN = "PKO-EGRESS-FWD"
#: Prefixes of the chains the node's own components create: kube-proxy and kubelet (KUBE-), the CNI plugins (CNI-).
NODE_CHAIN_PREFIXES = ("KUBE-", "CNI-")


class HostNetError(RuntimeError):
    """A network command failed; the message quotes it."""


@dataclass(frozen=True)
class Network:
    """The addresses of the test cluster on this machine."""

    node_ip: str
    uplink: str
    nameservers: tuple[str, ...] = ()
    pod_cidr: str = "10.88.0.0/16"
    service_cidr: str = "10.96.0.0/24"
    bridge: str = "pko-cni0"
    service_sink: str = "pko-svc0"

    @property
    def kubernetes_service_ip(self) -> str:
        """The first address of the Service range: the `kubernetes` Service."""
        return str(next(ipaddress.ip_network(self.service_cidr).hosts()))

    @property
    def dns_service_ip(self) -> str:
        """The ClusterIP of CoreDNS (`kube-dns`): the tenth address, as kubeadm chooses."""
        return str(ipaddress.ip_network(self.service_cidr).network_address + 10)


def parse_default_route(text: str) -> str | None:
    """The interface of the default route in `ip -o route show default` output."""
    match = re.search(r"^default .*?\bdev (\S+)", text, re.MULTILINE)
    return match.group(1) if match else None


def parse_addresses(text: str) -> list[str]:
    """The IPv4 addresses in `ip -o -4 addr show dev X` output."""
    return re.findall(r"\binet (\d+\.\d+\.\d+\.\d+)/", text)


def parse_nameservers(text: str) -> tuple[str, ...]:
    """The IPv4 nameservers of a resolv.conf."""
    found = re.findall(r"^\s*nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$", text, re.MULTILINE)
    return tuple(found)


def guard_rules(net: Network) -> list[list[str]]:
    """The iptables argument lists (table `mangle`) that build the egress guard, in order."""
    rules: list[list[str]] = [["-N", GUARD_CHAIN], ["-N", FORWARD_GUARD_CHAIN]]
    for server in net.nameservers:
        if any(ipaddress.ip_address(server) in ipaddress.ip_network(r) for r in PRIVATE_RANGES):
            for proto in ("udp", "tcp"):
                rules.append(["-A", GUARD_CHAIN, "-d", f"{server}/32", "-p", proto, "--dport", "53", "-j", "RETURN"])
    for cidr in PRIVATE_RANGES:
        rules.append(["-A", GUARD_CHAIN, "-d", cidr, "-j", "DROP"])
    # Pods have no business anywhere but this machine: nothing they send is forwarded out of the uplink.
    rules.append(["-A", FORWARD_GUARD_CHAIN, "-j", "DROP"])
    rules.append(["-I", "OUTPUT", "1", "-o", net.uplink, "-j", GUARD_CHAIN])
    rules.append(["-I", "FORWARD", "1", "-o", net.uplink, "-j", FORWARD_GUARD_CHAIN])
    return rules


def chains_to_remove(save_output: str, prefixes: Sequence[str]) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """From `iptables-save` output: the (table, chain) pairs whose name starts with one of `prefixes`, and the
    delete commands (``-t TABLE -D ...``) for every rule elsewhere that jumps to one of them."""
    chains: list[tuple[str, str]] = []
    deletes: list[list[str]] = []
    table = ""
    for line in save_output.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
        elif line.startswith(":"):
            name = line[1:].split()[0]
            if name.startswith(tuple(prefixes)):
                chains.append((table, name))
        elif line.startswith("-A "):
            parts = shlex.split(line)  # comments are quoted: "kubernetes service portals"
            chain = parts[1]
            if chain.startswith(tuple(prefixes)):
                continue  # flushed with its chain
            if "-j" in parts and parts[parts.index("-j") + 1].startswith(tuple(prefixes)):
                deletes.append(["-t", table, "-D", *parts[1:]])
    return chains, deletes


def _run(argv: Sequence[str], *, check: bool = True) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise HostNetError(f"{' '.join(argv)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def discover(resolv_conf: Path = Path("/etc/resolv.conf")) -> Network:
    """This machine's uplink (the default route's interface), its address and its resolvers."""
    uplink = parse_default_route(_run(["ip", "-o", "route", "show", "default"]))
    if uplink is None:
        raise HostNetError("no default route: cannot tell which interface the egress guard must close")
    addresses = parse_addresses(_run(["ip", "-o", "-4", "addr", "show", "dev", uplink]))
    if not addresses:
        raise HostNetError(f"{uplink} has no IPv4 address for the node")
    nameservers = parse_nameservers(resolv_conf.read_text()) if resolv_conf.exists() else ()
    return Network(node_ip=addresses[0], uplink=uplink, nameservers=nameservers)


def local_addresses() -> set[str]:
    """Every IPv4 address of this machine."""
    return set(parse_addresses(_run(["ip", "-o", "-4", "addr", "show"])))


def install_guard(net: Network) -> None:
    """Install the egress guard and the Service-range sink. Call :func:`sweep` first."""
    for rule in guard_rules(net):
        _run(["iptables", "-w", "-t", "mangle", *rule])
    _run(["ip", "link", "add", net.service_sink, "type", "bridge"])
    _run(["ip", "link", "set", net.service_sink, "up"])
    _run(["ip", "route", "add", net.service_cidr, "dev", net.service_sink])


def guard_installed(net: Network) -> bool:
    """Whether the guard's jumps are in place (a test asserts this while the cluster runs)."""
    rules = _run(["iptables", "-w", "-t", "mangle", "-S"], check=False)
    return (f"-A OUTPUT -o {net.uplink} -j {GUARD_CHAIN}" in rules
            and f"-A FORWARD -o {net.uplink} -j {FORWARD_GUARD_CHAIN}" in rules)


def _remove_chains(binary: str, prefixes: Sequence[str]) -> None:
    save = _run([f"{binary}-save"], check=False)
    chains, deletes = chains_to_remove(save, prefixes)
    for delete in deletes:
        _run([binary, "-w", *delete], check=False)
    for table, chain in chains:
        _run([binary, "-w", "-t", table, "-F", chain], check=False)
    for table, chain in chains:
        _run([binary, "-w", "-t", table, "-X", chain], check=False)


def remove_links(names: Iterable[str]) -> None:
    for name in names:
        if Path(f"/sys/class/net/{name}").exists():
            _run(["ip", "link", "del", name], check=False)


def sweep(net: Network) -> None:
    """Remove the guard, the node's chains, the bridges and the pod network namespaces. Idempotent."""
    _remove_chains("iptables", (*NODE_CHAIN_PREFIXES, GUARD_CHAIN))
    _remove_chains("ip6tables", NODE_CHAIN_PREFIXES)
    _run(["ip", "route", "del", net.service_cidr], check=False)
    remove_links((net.bridge, net.service_sink))
    netns = Path("/run/netns")
    if netns.is_dir():
        for entry in netns.glob("cni-*"):
            _run(["umount", "-l", str(entry)], check=False)
            with contextlib.suppress(OSError):
                entry.unlink()


def leftovers(net: Network) -> list[str]:
    """What of the node is still in the kernel: chains, links, routes, pod network namespaces (empty = clean)."""
    found: list[str] = []
    for binary in ("iptables", "ip6tables"):
        chains, _ = chains_to_remove(_run([f"{binary}-save"], check=False),
                                     (*NODE_CHAIN_PREFIXES, GUARD_CHAIN))
        found += [f"{binary} -t {table} chain {chain}" for table, chain in chains]
    found += [f"link {name}" for name in (net.bridge, net.service_sink) if Path(f"/sys/class/net/{name}").exists()]
    if net.service_cidr in _run(["ip", "route", "show"], check=False):
        found.append(f"route {net.service_cidr}")
    netns = Path("/run/netns")
    if netns.is_dir():
        found += [f"netns {entry.name}" for entry in netns.glob("cni-*")]
    return found
