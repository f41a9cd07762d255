"""The operator's settings: every flag, environment variable and Helm value of `pko operator`, declared once.

Why: a setting used to be parsed in the command, carried by a wiring dataclass and read again from the environment
by the component that needed it. Here each one is an :class:`Option` row — its flag (if any), the variable that
gives its default (the Go operator's names), the chart value that sets that variable, and the :class:`Settings`
field it fills — so a new setting touches this table, the component that uses it, and the docs. `pko operator`
builds its argument parser from :data:`OPTIONS` (:func:`parser`) and its :class:`Settings` with :func:`from_args`;
`pko dev` and tests build :class:`Settings` directly.

Pure: the environment comes in as an argument. Must never open connections or start anything.
"""

from __future__ import annotations

import argparse
import os
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pko.api import durations
from pko.api import workspace as ws_api
from pko.depcache import routes
from pko.kube import selectors
from pko.runtime import sharding

Runtime = Literal["pod", "local"]
RUNTIMES: tuple[Runtime, ...] = ("pod", "local")

DEFAULT_NAMESPACE = "pulumi-kubernetes-operator"
DEFAULT_SERVICE_ACCOUNT = "controller-manager"
DEFAULT_WORKERS = 25
DEFAULT_MAX_OPERATIONS = 200


@dataclass
class Settings:
    """What the operator's components are configured with (see :data:`OPTIONS` for where each value comes from)."""

    version: str
    # the manager
    kubeconfig: str | None = None  # also handed to local agents for their TokenReviews
    kube_api_timeout: float = 30.0
    git_timeout: float = 60.0  # seconds a git server may stay silent while a Stack's branch is resolved
    github_api_url: str = "https://api.github.com"  # where GitHub App installation tokens are asked for (GHES)
    min_resync: float = 60.0  # seconds; the floor under a Stack's resyncFrequencySeconds (resync and branch polling)
    kube_api_qps: float = 0.0  # requests a second to the API server (0: no limit, the reference's behaviour)
    kube_api_burst: int = 0  # requests allowed at once above that rate (0: as many as one second's qps)
    metrics_address: str = "0"
    health_address: str = ":8081"
    leader_elect: bool = False
    lease_duration: float = 60.0
    renew_deadline: float = 45.0
    retry_period: float = 10.0
    log_level: str = "info"
    log_encoder: str = "console"
    operator_namespace: str = DEFAULT_NAMESPACE  # the Lease's, and the service account's presenting agent tokens
    operator_service_account: str = DEFAULT_SERVICE_ACCOUNT
    # the controllers
    workers: int = DEFAULT_WORKERS
    max_operations: int = DEFAULT_MAX_OPERATIONS
    retry_max_backoff: float | None = None  # seconds; operator-wide cap of the failed-update backoff (default 24h)
    # the failure policy's other operator-wide defaults (None: the reference's 3 / 10s / 3 / never); a Stack's
    # spec.retryPolicy overrides each
    max_update_failures: int | None = None
    retry_backoff_base: float | None = None  # seconds
    retry_backoff_factor: float | None = None
    stalled_retry_interval: float | None = None  # seconds; 0: a Stalled Stack waits for a change
    # workspaces
    workspace_runtime: Runtime = "pod"
    workspace_root: Path = field(default_factory=lambda: Path.cwd() / ".pko" / "workspaces")
    workspace_agent: str | None = None  # the local runtime's agent executable (None: this pko's `pko agent`)
    workspace_agent_fork: bool = True  # the local runtime forks pko's own agents from one warm process
    agent_image: str | None = None
    agent_image_pull_policy: str | None = None
    agent_image_volume: bool = False  # pko: the pulumi container mounts the agent image (no bootstrap copy)
    flux_max_untar: str | None = None
    workspace_localhost: str | None = None
    workspace_idle_timeout: float = 0.0  # seconds; pko: scale idle workspaces to zero (0: never, as the Go operator)
    config_in_place: bool = True  # pko: a config-only change keeps the pod (False: a new pod, as the Go operator)
    update_idle_timeout: float = 1800.0  # seconds an operation may stay silent (0: no limit); an Update's own wins
    update_timeout: float = 0.0  # pko: seconds an operation may run in all (0: no limit); an Update's own wins
    restart_spread: float = 0.05  # pko: seconds of spread each settled Stack adds to the first looks after a start
    max_active_workspaces: int | None = None  # pko: the pool of active workspaces (None: no bound, as the Go operator)
    # pko: each workspace's /share on a claim of this size that outlives its pods (None: an emptyDir, as the Go
    # operator; pko.controllers.workspace.manifests.ShareVolume)
    workspace_share_volume_size: str | None = None
    workspace_share_volume_storage_class: str | None = None  # None: the cluster's default StorageClass
    # pko: sharding (pko.runtime.sharding); neither: this operator reconciles every object
    shard_key: str | None = None
    watch_label_selector: str | None = None
    # the Program file server (see pko.controllers.program)
    program_fs_addr: str | None = None
    program_fs_adv_addr: str | None = None
    # pko: the dependency cache on the file server's listener (see pko.depcache); no upstreams: off
    dependency_cache_upstreams: dict[str, str] = field(default_factory=dict)
    dependency_cache_dir: Path = field(default_factory=lambda: Path.cwd() / ".pko" / "dependency-cache")
    dependency_cache_size: int = 10 * 1024**3
    dependency_cache_index_ttl: float = 300.0

    @property
    def shard(self) -> sharding.Shard:
        """What this operator reconciles (:class:`sharding.ShardError` when both flags are given)."""
        return sharding.shard(shard_key=self.shard_key, watch_label_selector=self.watch_label_selector)


@dataclass(frozen=True)
class Option:
    """One setting: `flag` (None: environment only), the variable `env` that gives its default, the chart value
    `helm` that sets that variable, and the :class:`Settings` field it fills (None: accepted for compatibility)."""

    flag: str | None
    setting: str | None
    help: str
    env: str | None = None
    default: str | None = None
    parse: Callable[[str], Any] | None = None
    choices: Sequence[str] | None = None
    switch: bool = False  # a flag without a value (`--leader-elect`)
    helm: str | None = None

    def default_text(self, environ: Mapping[str, str]) -> str | None:
        if self.env is not None and self.env in environ:
            return environ[self.env]
        return self.default


def _at_least(low: float, parse: Callable[[str], float], what: str, *, strict: bool = False
              ) -> Callable[[str], Any]:
    """A parser that refuses values below `low` (or equal to it, when `strict`) with a message argparse shows."""
    def checked(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {what}: {text!r}") from None
        if value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(
                f"{what} must be {'greater than' if strict else 'at least'} {low:g}: {text!r}")
        return value
    checked.__name__ = what  # argparse names the type in its messages
    return checked


_POSITIVE_DURATION = _at_least(0, durations.parse, "positive duration", strict=True)


def _boolean(text: str) -> bool:
    """`true` or `false` (Go's strconv.ParseBool spellings), refused otherwise with a message argparse shows."""
    lowered = text.strip().lower()
    if lowered in ("1", "t", "true"):
        return True
    if lowered in ("0", "f", "false"):
        return False
    raise argparse.ArgumentTypeError(f"not true or false: {text!r}")


_UNITS = {"": 1, "k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
          "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}


def _byte_size(text: str) -> int:
    """A positive size in bytes, plain or with a Kubernetes quantity suffix (`500Mi`, `10Gi`, `2G`)."""
    number = text.strip().rstrip("KMGTkib")
    unit = text.strip()[len(number):]
    try:
        value = int(number) * _UNITS[unit]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"invalid size: {text!r} (bytes, or a quantity such as 10Gi)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"the size must be positive: {text!r}")
    return value


def _upstreams(text: str) -> dict[str, str]:
    if not text.strip():
        return {}
    try:
        return routes.parse_upstreams(text)
    except routes.UpstreamError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _volume_size(text: str) -> str | None:
    """A storage quantity such as 2Gi; empty: no claimed volume."""
    if not text.strip():
        return None
    if not ws_api.is_quantity(text.strip()):
        raise argparse.ArgumentTypeError(f"invalid volume size: {text!r} (a quantity such as 2Gi or 500Mi)")
    return text.strip()


def _pool_size(text: str) -> int | None:
    """A number of slots of at least 1; empty: no pool."""
    if not text.strip():
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number of workspaces: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"the pool needs at least 1 slot: {text!r} (leave it unset for no bound)")
    return value


def _shard_name(text: str) -> str | None:
    if not text.strip():
        return None
    try:
        return sharding.check_shard_name(text.strip())
    except sharding.ShardError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _selector(text: str) -> str | None:
    try:
        return selectors.parse(text).text or None
    except selectors.SelectorError as err:
        raise argparse.ArgumentTypeError(f"invalid label selector: {err}") from None


def _http_url(text: str) -> str:
    """An http(s) URL with a host, without a trailing slash."""
    parsed = urllib.parse.urlsplit(text.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.query or parsed.fragment:
        raise argparse.ArgumentTypeError(f"invalid URL: {text!r} (an http or https URL, such as "
                                         "https://github.example.com/api/v3)")
    return text.strip().rstrip("/")


def _resolved(text: str) -> str | None:
    return str(Path(text).resolve()) if text else None


OPTIONS: tuple[Option, ...] = (
    Option("--kubeconfig", "kubeconfig", "kubeconfig (default: in-cluster)", env="KUBECONFIG", parse=_resolved),
    Option("--metrics-bind-address", "metrics_address", 'address of /metrics ("0" turns it off)', default="0"),
    Option("--health-probe-bind-address", "health_address", "address of /healthz and /readyz", default=":8081"),
    Option("--leader-elect", "leader_elect", "elect a leader among replicas (Lease)", switch=True),
    Option("--metrics-secure", None, "accepted for compatibility; metrics are served over HTTP", default="true",
           helm="controller.metricsSecure"),
    Option("--enable-http2", None, "accepted for compatibility", default="false"),
    Option("--program-fs-addr", "program_fs_addr", "address the Program file server listens on",
           env="PROGRAM_FS_ADDR", default=":9090"),
    Option("--program-fs-adv-addr", "program_fs_adv_addr", "address workspaces use to reach the Program file server",
           env="PROGRAM_FS_ADV_ADDR"),
    Option("--dependency-cache-upstreams", "dependency_cache_upstreams",
           "pko: serve workspaces a pull-through cache of plugins, npm packages and Go modules from these upstreams "
           "(`plugins=URL,npm=URL,go=URL`, any of them, or `default` for Pulumi's, npmjs and proxy.golang.org; "
           "empty: off)", env="DEPENDENCY_CACHE_UPSTREAMS", default="", parse=_upstreams,
           helm="dependencyCache.upstreams"),
    Option("--dependency-cache-dir", "dependency_cache_dir", "where the dependency cache keeps its files",
           env="DEPENDENCY_CACHE_DIR", default=".pko/dependency-cache", parse=lambda text: Path(text).resolve()),
    Option("--dependency-cache-size", "dependency_cache_size",
           "bytes the dependency cache may hold (least recently used files go first)", env="DEPENDENCY_CACHE_SIZE",
           default="10Gi", parse=_byte_size, helm="dependencyCache.size"),
    Option("--dependency-cache-index-ttl", "dependency_cache_index_ttl",
           "how long npm packuments and Go module lists are served before they are fetched again (files never "
           "change and are kept)", env="DEPENDENCY_CACHE_INDEX_TTL", default="5m", parse=_POSITIVE_DURATION,
           helm="dependencyCache.indexTTL"),
    Option("--leader-election-lease-duration", "lease_duration", "", env="LEADER_ELECTION_LEASE_DURATION",
           default="60s", parse=durations.parse, helm="leaderElection.leaseDuration"),
    Option("--leader-election-renew-deadline", "renew_deadline", "", env="LEADER_ELECTION_RENEW_DEADLINE",
           default="45s", parse=durations.parse, helm="leaderElection.renewDeadline"),
    Option("--leader-election-retry-period", "retry_period", "", env="LEADER_ELECTION_RETRY_PERIOD",
           default="10s", parse=durations.parse, helm="leaderElection.retryPeriod"),
    Option("--kube-api-timeout", "kube_api_timeout", "", env="KUBE_API_TIMEOUT", default="30s",
           parse=durations.parse, helm="kubeAPI.timeout"),
    Option("--kube-api-qps", "kube_api_qps", "requests a second to the API server (0: no limit)",
           env="KUBE_API_QPS", default="0", parse=_at_least(0, float, "non-negative number"), helm="kubeAPI.qps"),
    Option("--kube-api-burst", "kube_api_burst", "requests above --kube-api-qps allowed at once (0: one second's)",
           env="KUBE_API_BURST", default="0", parse=_at_least(0, int, "non-negative integer"),
           helm="kubeAPI.burst"),
    Option("--zap-log-level", "log_level", "debug, info, error (or a number)", default="info",
           helm="controller.logLevel"),
    Option("--zap-encoder", "log_encoder", "", default="console", choices=("console", "json"),
           helm="controller.logFormat"),
    Option("--zap-time-encoding", None, "", default="iso8601"),
    Option("--zap-devel", None, "", switch=True),
    Option("--workspace-runtime", "workspace_runtime",
           "run workspace agents in pods (default) or as local processes (no kubelet needed)",
           env="WORKSPACE_RUNTIME", default="pod", choices=RUNTIMES),
    Option("--workspace-root", "workspace_root", "where the local runtime keeps workspaces", env="WORKSPACE_ROOT",
           default=".pko/workspaces", parse=lambda text: Path(text).resolve()),
    Option("--workspace-agent", "workspace_agent",
           "the agent executable the local runtime runs (default: this pko's own; the Go operator's `agent` works "
           "too)", env="WORKSPACE_AGENT"),
    Option("--workspace-agent-fork", "workspace_agent_fork",
           "the local runtime forks this pko's agents from one process that has imported the agent (false: a new "
           "Python process for each)", env="WORKSPACE_AGENT_FORK", default="true", parse=_boolean),
    Option("--workspace-idle-timeout", "workspace_idle_timeout",
           "scale a workspace to zero after this long without an update (0: never, as the Go operator); a Stack's "
           "workspaceIdleTimeout overrides it", env="WORKSPACE_IDLE_TIMEOUT", default="0",
           parse=_at_least(0, durations.parse, "non-negative duration"), helm="controller.workspaceIdleTimeout"),
    Option("--workspace-agent-image-volume", "agent_image_volume",
           "pko: workspace pods mount the agent image read-only (a Kubernetes image volume: 1.35, or 1.33-1.34 with "
           "the ImageVolume gate) and run the agent from it, with no bootstrap container copying it into /share "
           "(false: the copy, as the Go operator)", env="WORKSPACE_AGENT_IMAGE_VOLUME", default="false",
           parse=_boolean, helm="controller.workspaceAgentImageVolume"),
    Option("--workspace-config-in-place", "config_in_place",
           "apply a change of config values to the running workspace (false: a new pod for every change, as the Go "
           "operator)", env="WORKSPACE_CONFIG_IN_PLACE", default="true", parse=_boolean,
           helm="controller.workspaceConfigInPlace"),
    Option("--update-idle-timeout", "update_idle_timeout",
           "cancel an operation that has sent no output for this long, and fail its Update (0: no limit); an "
           "Update's spec.idleTimeout (a Stack's updateTemplate) overrides it", env="UPDATE_IDLE_TIMEOUT",
           default="30m", parse=_at_least(0, durations.parse, "non-negative duration"),
           helm="controller.updateIdleTimeout"),
    Option("--update-timeout", "update_timeout",
           "pko: cancel an operation that has run for this long in all, output or not, and fail its Update (0: no "
           "limit, as the Go operator); an Update's spec.timeout (a Stack's updateTemplate) overrides it",
           env="UPDATE_TIMEOUT", default="0", parse=_at_least(0, durations.parse, "non-negative duration"),
           helm="controller.updateTimeout"),
    Option("--max-active-workspaces", "max_active_workspaces",
           "workspaces whose agent (pod or process) may run at once; more wait in a queue and idle ones sleep to "
           "make room (unset: no bound, as the Go operator)", env="MAX_ACTIVE_WORKSPACES", default="",
           parse=_pool_size, helm="controller.maxActiveWorkspaces"),
    Option("--workspace-share-volume-size", "workspace_share_volume_size",
           "pko: put each workspace pod's /share on a PersistentVolumeClaim of this size (such as 2Gi), kept while "
           "the workspace sleeps, so a wake or a new pod reuses what the last one installed (unset: an emptyDir, as "
           "the Go operator)", env="WORKSPACE_SHARE_VOLUME_SIZE", default="", parse=_volume_size,
           helm="controller.workspaceShareVolume.size"),
    Option("--workspace-share-volume-storage-class", "workspace_share_volume_storage_class",
           "pko: the StorageClass of those claims (unset: the cluster's default)",
           env="WORKSPACE_SHARE_VOLUME_STORAGE_CLASS", default="", parse=lambda text: text.strip() or None,
           helm="controller.workspaceShareVolume.storageClass"),
    Option("--shard-key", "shard_key",
           "pko: reconcile only the Stacks, Workspaces, Updates and Programs labelled sharding.fluxcd.io/key=NAME "
           "(Flux's sharding; the default shard runs with --watch-label-selector '!sharding.fluxcd.io/key')",
           env="SHARD_KEY", default="", parse=_shard_name),
    Option("--watch-label-selector", "watch_label_selector",
           "pko: reconcile only the Stacks, Workspaces, Updates and Programs this label selector matches (Flux's "
           "flag; empty: all)", env="WATCH_LABEL_SELECTOR", default="", parse=_selector),
    Option("--max-concurrent-reconciles", "workers", "", env="MAX_CONCURRENT_RECONCILES",
           default=str(DEFAULT_WORKERS), parse=int, helm="controller.maxConcurrentReconciles"),
    Option("--retry-max-backoff", "retry_max_backoff",
           "operator-wide cap of the failed-update backoff (10s·3ⁿ); a Stack's retryMaxBackoffDurationSeconds "
           "overrides it", env="RETRY_MAX_BACKOFF_DURATION", default="24h", parse=_POSITIVE_DURATION,
           helm="controller.retryMaxBackoff"),
    Option("--max-update-failures", "max_update_failures",
           "failures counted before a Stack is Stalled (0: at the first); a Stack's retryPolicy.maxFailures "
           "overrides it", env="MAX_UPDATE_FAILURES", default="3", parse=_at_least(0, int, "non-negative integer"),
           helm="controller.maxUpdateFailures"),
    Option("--retry-backoff-base", "retry_backoff_base",
           "wait after the first failed update; a Stack's retryPolicy.backoffBaseSeconds overrides it",
           env="RETRY_BACKOFF_BASE", default="10s", parse=_POSITIVE_DURATION, helm="controller.retryBackoffBase"),
    Option("--retry-backoff-factor", "retry_backoff_factor",
           "growth of the wait between retries (1: constant); a Stack's retryPolicy.backoffFactor overrides it",
           env="RETRY_BACKOFF_FACTOR", default="3", parse=_at_least(1, float, "factor of at least 1"),
           helm="controller.retryBackoffFactor"),
    Option("--stalled-retry-interval", "stalled_retry_interval",
           "retry a Stack Stalled by failed updates this long after its last failure (0: never, as the Go "
           "operator); a Stack's retryPolicy.stalledRetryIntervalSeconds overrides it",
           env="STALLED_RETRY_INTERVAL", default="0", parse=_at_least(0, durations.parse, "non-negative duration"),
           helm="controller.stalledRetryInterval"),
    Option("--git-timeout", "git_timeout",
           "how long a git server may stay silent while a Stack's branch is resolved before the Stack is "
           "Stalled with SourceUnavailable", env="GIT_TIMEOUT", default="60s", parse=_POSITIVE_DURATION),
    Option("--github-api-url", "github_api_url",
           "the GitHub API that issues installation tokens for gitAuth.githubApp: https://api.github.com, or a "
           "GitHub Enterprise Server's https://HOST/api/v3", env="GITHUB_API_URL", default="https://api.github.com",
           parse=_http_url),
    Option("--min-resync-frequency", "min_resync",
           "the shortest resync period and branch poll interval a Stack's resyncFrequencySeconds may ask for (the "
           "Go operator's fixed 60s)", env="MIN_RESYNC_FREQUENCY", default="60s", parse=_POSITIVE_DURATION,
           helm="controller.minResyncFrequency"),
    Option("--max-concurrent-updates", "max_operations",
           "Pulumi operations in flight at once (they do not hold reconcile workers)", env="MAX_CONCURRENT_UPDATES",
           default=str(DEFAULT_MAX_OPERATIONS), parse=int, helm="controller.maxConcurrentUpdates"),
    # Environment only.
    Option(None, "operator_namespace", "the operator's namespace", env="POD_NAMESPACE", default=DEFAULT_NAMESPACE),
    Option(None, "operator_service_account", "the operator's service account", env="POD_SA_NAME",
           default=DEFAULT_SERVICE_ACCOUNT),
    Option(None, "agent_image", "image of the workspace pods' init containers", env="AGENT_IMAGE",
           helm="image.repository"),
    Option(None, "agent_image_pull_policy", "their pull policy", env="AGENT_IMAGE_PULL_POLICY",
           helm="image.pullPolicy"),
    Option(None, "flux_max_untar", "largest artifact a workspace unpacks", env="FLUX_MAX_UNTAR_SIZE_BYTES",
           helm="flux.maxUntarSizeBytes"),
    Option(None, "workspace_localhost", "call every agent at this address", env="WORKSPACE_LOCALHOST"),
)


def _dest(option: Option) -> str:
    assert option.flag is not None
    return option.flag.lstrip("-").replace("-", "_")


def parser(environ: Mapping[str, str] | None = None, prog: str = "pko operator") -> argparse.ArgumentParser:
    """The argument parser of `pko operator`: one argument per flag of :data:`OPTIONS`, defaults from `environ`."""
    env = os.environ if environ is None else environ
    p = argparse.ArgumentParser(prog=prog, description="Run the Pulumi Kubernetes Operator (pko).")
    for option in OPTIONS:
        if option.flag is None:
            continue
        if option.switch:
            p.add_argument(option.flag, action="store_true", help=option.help or None)
            continue
        kwargs: dict[str, Any] = {"default": option.default_text(env), "help": option.help or None}
        if option.parse is not None:
            kwargs["type"] = option.parse
        if option.choices is not None:
            kwargs["choices"] = list(option.choices)
        p.add_argument(option.flag, **kwargs)
    return p


def _environment_only(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for option in OPTIONS:
        if option.flag is None and option.setting is not None:
            text = environ.get(option.env or "") or option.default  # empty counts as unset
            values[option.setting] = option.parse(text) if option.parse and text is not None else text
    return values


def from_args(args: argparse.Namespace, version: str, environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from parsed flags, and from `environ` for the environment-only ones."""
    values = _environment_only(os.environ if environ is None else environ)
    for option in OPTIONS:
        if option.flag is not None and option.setting is not None:
            values[option.setting] = getattr(args, _dest(option))
    return Settings(version=version, **values)


def from_environment(version: str, environ: Mapping[str, str] | None = None, **fields: Any) -> Settings:
    """Settings for an operator run in-process (``pko dev``, tests): `fields` as given, the environment-only
    settings from `environ`, every flag at its built-in default."""
    values = _environment_only(os.environ if environ is None else environ) | fields
    return Settings(version=version, **values)
