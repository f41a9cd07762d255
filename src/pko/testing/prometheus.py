"""A real Prometheus server (built by `make tools` from the same Go module as promtool) that scrapes the test
cluster's pods.

Why: a health gate that queries PromQL is only tested when a real Prometheus has scraped real pods and answers the
query over its HTTP API. This one discovers pods as a cluster's own Prometheus does (``kubernetes_sd_configs``,
role ``pod``, through the test cluster's kubeconfig), keeps only the pods of the given namespaces that carry a given
label and are running, and scrapes each pod's IP at a given port and path every 2 seconds, so a test sees a changed
value within seconds.

Network: it listens on 127.0.0.1 (or the node's address, for pods to reach it), talks to the test cluster's API
server (through its kubeconfig) and to the pods it discovers there; nothing else.

Usage::

    with prometheus.running(workdir, cluster.kubeconfig, [namespace], ("app", "demo"), port=8080) as server:
        server.query('up{namespace="..."}')
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pko.testing import binaries, gitserver, ports

SCRAPE_INTERVAL = "2s"
JOB = "pods"
#: One sample of an instant vector: its labels and its value.
Sample = tuple[dict[str, str], float]


class PrometheusError(RuntimeError):
    """Prometheus did not start, or answered a query with an error."""


def meta_label(label: str) -> str:
    """The discovery meta label of pod label `label` (Prometheus turns every character outside [a-zA-Z0-9_] into
    `_`): ``app.kubernetes.io/name`` is ``__meta_kubernetes_pod_label_app_kubernetes_io_name``."""
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)


def config(kubeconfig: Path, namespaces: Sequence[str], label: tuple[str, str], port: int,
           path: str = "/metrics") -> dict[str, Any]:
    """The server's configuration (JSON is YAML): one job that scrapes, at ``<pod IP>:<port><path>``, the running
    pods of `namespaces` whose label ``label[0]`` is ``label[1]``, with their namespace and name as labels."""
    key, value = label
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                   "evaluation_interval": SCRAPE_INTERVAL},
        "scrape_configs": [{
            "job_name": JOB,
            "metrics_path": path,
            "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": str(kubeconfig),
                                       "namespaces": {"names": list(namespaces)}}],
            "relabel_configs": [
                {"source_labels": [meta_label(key)], "regex": re.escape(value), "action": "keep"},
                {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Running", "action": "keep"},
                {"source_labels": ["__meta_kubernetes_pod_ip"], "regex": "(.+)", "replacement": f"${{1}}:{port}",
                 "target_label": "__address__", "action": "replace"},
                {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            ],
        }],
    }


@dataclass
class Prometheus:
    """A running server; :attr:`url` is what a PromQL health gate is configured with."""

    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    host: str = gitserver.LOOPBACK
    _closed: bool = field(default=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def ready(self) -> bool:
        """Whether the server answers ``/-/ready`` (its storage is open and it serves queries)."""
        if self.process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def query(self, expr: str) -> list[Sample]:
        """The instant vector `expr` evaluates to now (``/api/v1/query``): each series' labels and value. A scalar
        is one sample without labels; an error of the expression is a :class:`PrometheusError`."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as err:
            raise PrometheusError(f"query {expr!r}: {err.code} {err.read()[:500]!r}") from None
        if answer.get("status") != "success":
            raise PrometheusError(f"query {expr!r}: {answer}")
        data = answer["data"]
        if data["resultType"] == "vector":
            return [(dict(s["metric"]), float(s["value"][1])) for s in data["result"]]
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        raise PrometheusError(f"query {expr!r}: a {data['resultType']}, not an instant vector")

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets (``/api/v1/targets``): what a failing test prints."""
        with urllib.request.urlopen(f"{self.url}/api/v1/targets?state=active", timeout=10) as response:
            found: list[dict[str, Any]] = json.loads(response.read())["data"]["activeTargets"]
            return found

    def log(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if not self._closed and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._closed = True


def start(workdir: Path, kubeconfig: Path, namespaces: Sequence[str], label: tuple[str, str], port: int,
          path: str = "/metrics", timeout: float = 60.0, host: str = gitserver.LOOPBACK) -> Prometheus:
    """Start Prometheus on a free port of `host` (127.0.0.1, or the node's address where pods, such as the
    operator's gate checks, must reach it), its storage and log under `workdir`, scraping as :func:`config` says;
    returns once it is ready. Fails loudly when `make tools` has not built it."""
    binary = binaries.require("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "prometheus.yml"
    config_path.write_text(json.dumps(config(kubeconfig, namespaces, label, port, path), indent=1))
    log_path = workdir / "prometheus.log"

    def launch(listen: int) -> Prometheus:
        storage = workdir / f"data-{listen}"
        process = subprocess.Popen(
            [str(binary), f"--config.file={config_path}", f"--storage.tsdb.path={storage}",
             f"--web.listen-address={host}:{listen}", "--storage.tsdb.retention.time=2h",
             "--log.level=warn"],
            stdout=log_path.open("ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir,
        )
        return Prometheus(listen, process, log_path, host)

    started = ports.start_on_free_port(launch, Prometheus.ready, timeout=timeout)
    if started is not None:
        return started
    raise PrometheusError(f"prometheus did not become ready on {host}:\n"
                          f"{log_path.read_text(errors='replace')[-3000:] if log_path.exists() else ''}")


@contextlib.contextmanager
def running(workdir: Path, kubeconfig: Path, namespaces: Sequence[str], label: tuple[str, str], port: int,
            path: str = "/metrics") -> Iterator[Prometheus]:
    """:func:`start`, stopped on exit."""
    server = start(workdir, kubeconfig, namespaces, label, port, path)
    try:
        yield server
    finally:
        server.stop()
