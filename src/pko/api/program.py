"""The Program kind (``pulumi.com/v1``): an inline Pulumi YAML program, served to workspaces as an artifact.

Why: users describe a small program (config, resources, variables, outputs, packages) directly in Kubernetes;
the Program controller renders it to a tarball and publishes a Flux-compatible ``status.artifact``. Note the
top-level field is ``program`` (there is no ``spec``). Resource properties, variables and outputs are free-form
Pulumi YAML expressions and stay plain JSON.

Must never: interpret or normalise Pulumi YAML expressions.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic

from pko.api.meta import ObjectMeta, Time, Wire
from pko.api.schema import MinLength, Pattern

GROUP = "pulumi.com"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Program"
PLURAL = "programs"

DIGEST_PATTERN = r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$"

ConfigType = Literal["String", "Number", "List<Number>", "List<String>"]


class Configuration(Wire):
    """A config input of the program; give a type, a default, or both."""

    type: ConfigType | None = None
    default: Any = None


class CustomTimeouts(Wire):
    create: str | None = None
    delete: str | None = None
    update: str | None = None


class Options(Wire):
    """Pulumi resource options."""

    additional_secret_outputs: list[str] | None = None
    aliases: list[str] | None = None
    custom_timeouts: CustomTimeouts | None = None
    delete_before_replace: bool | None = None
    depends_on: list[Any] | None = None
    ignore_changes: list[str] | None = None
    import_: str | None = pydantic.Field(None, alias="import")
    parent: Any = None
    protect: bool | None = None
    provider: Any = None
    providers: dict[str, Any] | None = None
    version: str | None = None


class Getter(Wire):
    """Read an existing resource instead of managing it."""

    id: Annotated[str, MinLength(1)]
    state: dict[str, Any] | None = None


class Resource(Wire):
    """A Pulumi resource of the program."""

    type: Annotated[str, MinLength(1)] = pydantic.Field(description="Pulumi type token of the resource.")
    properties: dict[str, Any] | None = None
    options: Options | None = None
    get: Getter | None = None


class ProgramSpec(Wire):
    """A Pulumi YAML program."""

    configuration: dict[str, Configuration] | None = None
    resources: dict[str, Resource] | None = None
    variables: dict[str, Any] | None = None
    outputs: dict[str, Any] | None = None
    packages: dict[str, str] | None = None


class Artifact(Wire):
    """The program's tarball, as a Flux-style artifact."""

    path: str
    url: str
    revision: str
    digest: Annotated[str, Pattern(DIGEST_PATTERN)] | None = None
    last_update_time: Time
    size: int | None = None
    metadata: dict[str, str] | None = None


class ProgramStatus(Wire):
    """The observed state of a Program."""

    observed_generation: int | None = None
    artifact: Artifact | None = None


class Program(Wire):
    """A Program object."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta = pydantic.Field(default_factory=ObjectMeta)
    program: ProgramSpec | None = None
    status: ProgramStatus | None = None
