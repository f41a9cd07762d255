"""The StackRollout kind (``pulumi.com/v1alpha1``, pko only): one change taken through a fleet of Stacks in waves.

Why a kind of its own: a platform team changes many Stacks at once (a new commit, branch, Program or config value)
and wants it to reach a few first, be checked (PromQL, HTTP, Stack outputs) and go back by itself when the checks
fail. The rollout names the Stacks by label, the revision, the waves (a label selector or a share of the fleet,
each with its concurrency and bake time), the failure rate that pauses it and the health gates; its status says
which Stack runs which revision and why it paused or rolled back. RBAC on ``stackrollouts`` decides who may roll
out, as it does for StackApprovals.

The API server refuses a rollout without a selector, a revision or waves, a wave that is neither (or both) a
selector and a percentage, a gate that is not exactly one kind, and any change of what it rolls out after creation
(only ``paused`` and ``abort`` may change: that is how ``kubectl pko rollout`` steers it).

Must never: carry anything secret (Stack config that is secret lives in Secrets, not in a revision); default a
field (defaults live in the controller's rules, docs/rollouts.md).
"""

from __future__ import annotations

from typing import Annotated, Any

import pydantic

from pko.api.meta import Conditions, ObjectMeta, Time, Wire
from pko.api.schema import (
    CoreType,
    Maximum,
    MaxItems,
    MaxLength,
    Minimum,
    MinLength,
    OpenObject,
    Pattern,
    Rule,
    Schemaless,
)
from pko.api.stack import ProgramReference

GROUP = "pulumi.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "StackRollout"
PLURAL = "stackrollouts"

LabelSelector = Annotated[dict[str, Any], CoreType("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector")]

_DURATION = r"^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MAX_WAVES = 20
MAX_GATES = 10


def _duration(field: str, example: str) -> Rule:
    return Rule(f"self.matches('{_DURATION}')", f"{field} must be a duration such as {example}")


REVISION_RULE = "has(self.commit) || has(self.branch) || has(self.programRef) || has(self.config)"
REVISION_MESSAGE = "revision needs at least one of commit, branch, programRef or config"
REVISION_GIT_RULE = "!(has(self.commit) && has(self.branch))"
REVISION_GIT_MESSAGE = "revision takes commit or branch, not both"
WAVES_MESSAGE = "a rollout needs at least one wave"
WAVE_RULE = "has(self.selector) != has(self.percent)"
WAVE_MESSAGE = "a wave takes either selector or percent"
GATE_RULE = "[has(self.prometheus), has(self.http), has(self.outputs)].filter(x, x).size() == 1"
GATE_MESSAGE = "a gate takes exactly one of prometheus, http or outputs"
IMMUTABLE_RULE = ("self.selector == oldSelf.selector && self.revision == oldSelf.revision && "
                  "self.waves == oldSelf.waves && has(self.gates) == has(oldSelf.gates) && "
                  "(!has(self.gates) || self.gates == oldSelf.gates) && "
                  "has(self.maxFailureRate) == has(oldSelf.maxFailureRate) && "
                  "(!has(self.maxFailureRate) || self.maxFailureRate == oldSelf.maxFailureRate)")
IMMUTABLE_MESSAGE = "only paused and abort of a StackRollout can change: create a new StackRollout to roll out " \
                    "something else"

# status.phase
PENDING = "Pending"
PROGRESSING = "Progressing"
BAKING = "Baking"
PAUSED = "Paused"
BLOCKED = "Blocked"
ROLLING_BACK = "RollingBack"
ROLLED_BACK = "RolledBack"
COMPLETED = "Completed"
TERMINAL = (ROLLED_BACK, COMPLETED)

# status.conditions reasons (Ready / Reconciling / Stalled as kstatus reads them)
REASON_WAVE_PROGRESSING = "WaveProgressing"
REASON_BAKING = "Baking"
REASON_WAITING_FOR_APPROVAL = "WaitingForApproval"
REASON_PAUSED = "PausedByUser"
REASON_FAILURE_RATE = "FailureRateExceeded"
REASON_CONFLICT = "StackInAnotherRollout"
REASON_GATE_FAILED = "GateFailed"
REASON_ABORTED = "Aborted"
REASON_ROLLBACK_FAILED = "RollbackFailed"
REASON_COMPLETED = "RolloutCompleted"
REASON_ROLLED_BACK = "RolledBack"
REASON_NO_STACKS = "NoStacks"

# status.stacks[].state
STACK_PENDING = "Pending"
STACK_UPDATING = "Updating"
STACK_SUCCEEDED = "Succeeded"
STACK_FAILED = "Failed"
STACK_SKIPPED = "Skipped"
STACK_ROLLING_BACK = "RollingBack"
STACK_ROLLED_BACK = "RolledBack"
STACK_ROLLBACK_FAILED = "RollbackFailed"

# status.waves[].phase
WAVE_PENDING = "Pending"
WAVE_PROGRESSING = "Progressing"
WAVE_BAKING = "Baking"
WAVE_SUCCEEDED = "Succeeded"
WAVE_FAILED = "Failed"
WAVE_ROLLED_BACK = "RolledBack"
WAVE_SKIPPED = "Skipped"

# status.gates[].result
GATE_PASSED = "Passed"
GATE_FAILED = "Failed"
GATE_UNKNOWN = "Unknown"


class RolloutRevision(Wire):
    """What the Stacks move to. Each field set replaces that field of a Stack's spec; ``config`` is merged into
    ``spec.config`` key by key (a null value removes the key)."""

    __schema_markers__ = (Rule(REVISION_RULE, REVISION_MESSAGE), Rule(REVISION_GIT_RULE, REVISION_GIT_MESSAGE))

    commit: Annotated[str, Pattern(r"^[0-9a-f]{7,64}$")] | None = pydantic.Field(
        None, description="A git commit (the Stacks' spec.commit; a branch they tracked is dropped).")
    branch: Annotated[str, MinLength(1), MaxLength(255)] | None = pydantic.Field(
        None, description="A git branch (the Stacks' spec.branch; a pinned commit is dropped).")
    program_ref: ProgramReference | None = pydantic.Field(
        None, description="A Program in the Stacks' namespace: a new Program generation is rolled out as a new "
                          "Program object (the Stacks' spec.programRef).")
    config: Annotated[dict[str, Any], OpenObject()] | None = pydantic.Field(
        None, description="Config values merged into the Stacks' spec.config, by key (null removes the key).")


class Wave(Wire):
    """One step of the rollout: the Stacks it takes, how many at once, and how long it bakes before the next."""

    __schema_markers__ = (Rule(WAVE_RULE, WAVE_MESSAGE),)

    name: Annotated[str, MaxLength(63), Pattern(NAME_PATTERN)] | None = pydantic.Field(
        None, description="Shown in status and events (default wave-<n>, from 1).")
    selector: LabelSelector | None = pydantic.Field(
        None, description="The Stacks of this wave among those the rollout selects and no earlier wave took.")
    percent: Annotated[int, Minimum(1), Maximum(100)] | None = pydantic.Field(
        None, description="This share of the whole fleet (rounded up), from the Stacks no earlier wave took, by "
                          "name.")
    max_concurrent: Annotated[int, Minimum(1)] | None = pydantic.Field(
        None, description="At most this many Stacks of the wave updating at once (default: all of them).")
    bake: Annotated[str, MaxLength(64), _duration("bake", "10m or 90s")] | None = pydantic.Field(
        None, description="After every Stack of the wave is at the revision, wait this long with the gates passing "
                          "before the next wave (default 0s: the gates are checked once).")


class PrometheusGate(Wire):
    """Healthy while a PromQL query returns at least one sample and every sample is within [min, max] (without
    bounds: every sample is non-zero)."""

    address: Annotated[str, Pattern(r"^https?://")] = pydantic.Field(
        description="The Prometheus server, e.g. http://prometheus.monitoring:9090.")
    query: Annotated[str, MinLength(1), MaxLength(4096)] = pydantic.Field(description="An instant PromQL query.")
    min: float | None = None
    max: float | None = None


class HTTPGate(Wire):
    """Healthy while a GET of the URL answers one of the expected statuses (and contains the text, when given)."""

    url: Annotated[str, Pattern(r"^https?://")]
    expect_status: Annotated[list[Annotated[int, Minimum(100), Maximum(599)]], MaxItems(16)] | None = pydantic.Field(
        None, description="The statuses that count as healthy (default: any 2xx).")
    body_contains: str | None = None
    timeout_seconds: Annotated[int, Minimum(1), Maximum(300)] | None = pydantic.Field(
        None, description="Default 10.")


class OutputsGate(Wire):
    """Healthy while every Stack the rollout has moved so far has this output with this value (status.outputs)."""

    output: Annotated[str, MinLength(1), MaxLength(253)]
    equals: Annotated[Any, Schemaless()] = pydantic.Field(
        None, description="The value (any JSON) the output must have; absent: the output must exist.")


class SecretReference(Wire):
    name: Annotated[str, MinLength(1), MaxLength(253)]


class Gate(Wire):
    """A health check run when a wave is at the revision and throughout its bake time; enough failures in a row
    roll the rollout back."""

    __schema_markers__ = (Rule(GATE_RULE, GATE_MESSAGE),
                          Rule("!has(self.headersSecretRef) || !has(self.outputs)",
                               "headersSecretRef is for prometheus and http gates"))

    name: Annotated[str, MinLength(1), MaxLength(63), Pattern(NAME_PATTERN)]
    prometheus: PrometheusGate | None = None
    http: HTTPGate | None = None
    outputs: OutputsGate | None = None
    headers_secret_ref: SecretReference | None = pydantic.Field(
        None, description="A Secret in the rollout's namespace whose keys are HTTP header names and values their "
                          "values, sent with each check (e.g. Authorization: Bearer ...).")
    interval: Annotated[str, MaxLength(64), _duration("interval", "30s or 1m"), Rule(
        f"!self.matches('{_DURATION}') || duration(self) >= duration('1s')", "interval must be at least 1s")] | None = \
        pydantic.Field(
        None, description="Time between checks while a wave bakes (default 30s).")
    failure_limit: Annotated[int, Minimum(1), Maximum(100)] | None = pydantic.Field(
        None, description="Failed checks in a row that fail the gate (default 3; an unreachable endpoint counts).")


class StackRolloutSpec(Wire):
    """What is rolled out to which Stacks, in which waves, checked how."""

    __schema_markers__ = (Rule(IMMUTABLE_RULE, IMMUTABLE_MESSAGE),)

    selector: LabelSelector = pydantic.Field(description="The Stacks (in this namespace) the rollout changes.")
    revision: RolloutRevision
    waves: Annotated[list[Wave], MaxItems(MAX_WAVES), Rule("size(self) >= 1", WAVES_MESSAGE)] = pydantic.Field(
        description="The waves, in order; Stacks no wave takes are left alone (status.unassigned).")
    gates: Annotated[list[Gate], MaxItems(MAX_GATES)] | None = None
    max_failure_rate: Annotated[int, Minimum(0), Maximum(100)] | None = pydantic.Field(
        None, description="Pause when more than this percentage of a wave's Stacks failed their update (default 0: "
                          "the first failure pauses).")
    paused: bool | None = pydantic.Field(None, description="Start no further Stack while true.")
    abort: bool | None = pydantic.Field(
        None, description="Roll every Stack already changed back to its previous revision, and stop.")


class RolloutStack(Wire):
    """One Stack of the rollout: its wave, where it is, and what undoes the change."""

    name: str
    wave: int = pydantic.Field(description="Index in spec.waves (from 0).")
    state: str = pydantic.Field(description="Pending, Updating, Succeeded, Failed, Skipped, RollingBack, "
                                            "RolledBack or RollbackFailed.")
    generation: int | None = pydantic.Field(None, description="The Stack generation the state is about.")
    previous: Annotated[Any, Schemaless()] = pydantic.Field(
        None, description="The merge patch of spec that restores the Stack's previous revision.")
    message: str | None = None


class WaveStatus(Wire):
    name: str
    phase: str = pydantic.Field(description="Pending, Progressing, Baking, Succeeded, Failed, RolledBack or Skipped.")
    stacks: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    promoted: bool | None = pydantic.Field(None, description="A promote let the wave go on past its failure rate.")
    bake_promoted: bool | None = pydantic.Field(None, description="A promote ended the wave's bake early.")
    started_at: Time | None = None
    bake_started_at: Time | None = None
    completed_at: Time | None = None


class GateStatus(Wire):
    name: str
    result: str
    message: str | None = None
    failures: int | None = pydantic.Field(None, description="Failed checks in a row.")
    last_checked: Time | None = None


class StackRolloutStatus(Wire):
    observed_generation: int | None = None
    revision: RolloutRevision | None = pydantic.Field(
        None, description="The revision as it was when the rollout started: what it rolls out.")
    conditions: Conditions | None = None
    phase: str | None = None
    message: str | None = None
    current_wave: int | None = pydantic.Field(None, description="Index in spec.waves of the wave in progress.")
    waves: list[WaveStatus] | None = None
    stacks: Annotated[list[RolloutStack], MaxItems(2000)] | None = None
    unassigned: int | None = pydantic.Field(None, description="Selected Stacks no wave takes (left alone).")
    gates: list[GateStatus] | None = None
    promoted: str | None = pydantic.Field(None, description="The last promote request handled.")
    rollback_reason: str | None = pydantic.Field(None, description="Why the rollout rolls back: GateFailed or "
                                                                   "Aborted.")
    started_at: Time | None = None
    completed_at: Time | None = None


class StackRollout(Wire):
    api_version: str = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta = pydantic.Field(default_factory=ObjectMeta)
    spec: StackRolloutSpec | None = None
    status: StackRolloutStatus | None = None

