"""Program artifacts: a ``Program`` object rendered as a Pulumi YAML project, packed as a deterministic ``.tar.gz``.

Why: a Stack that references a Program fetches it like any Flux artifact — download, verify the ``sha256:``
digest, extract. The Program controller computes that digest once and publishes it in ``status.artifact``; the
file server regenerates the archive on every request instead of storing it. Both only agree if the same Program
always yields byte-identical archives, so everything that could vary is pinned: keys sorted the way
``sigs.k8s.io/yaml`` sorts them, a single ``Pulumi.yaml`` member (mode 0775, mtime 0, uid/gid 0, no owner names,
ustar format, no record padding) and a gzip stream with mtime 0 and no file name.

The project is ``{name: <Program name>, runtime: yaml}`` plus the program's fields under their CRD names
(``configuration``, ``resources``, ``variables``, ``outputs``, ``packages``), with Go's ``omitempty`` applied as the
Go operator's typed structs apply it: empty strings, ``false`` and empty lists/maps of typed fields are left
out, objects given (even empty ones) and every free-form Pulumi YAML expression are kept verbatim.

Pure: a model in, bytes out (kept for each uid and generation, :func:`build`). Must never do I/O, read the
clock or interpret Pulumi YAML expressions.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import gzip
import hashlib
import io
import re
import tarfile
from typing import Any

import yaml

from pko.api import program as program_api

PROJECT_FILE = "Pulumi.yaml"
PROJECT_RUNTIME = "yaml"
FILE_MODE = 0o775
COMPRESS_LEVEL = 6  # Go's gzip.DefaultCompression
_BLOCK = tarfile.BLOCKSIZE


@dataclasses.dataclass(frozen=True)
class Artifact:
    """A packed program: the ``.tar.gz`` bytes and their digest."""

    data: bytes
    digest: str

    @property
    def size(self) -> int:
        return len(self.data)


# --- the project document --------------------------------------------------------------------------------------


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    """Go ``omitempty`` for typed scalar and collection fields: drop "", False, None, [] and {}."""
    if value is None or value is False or value == "" or value == [] or value == {}:
        return
    out[key] = value


def _timeouts(timeouts: program_api.CustomTimeouts) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _put(out, "create", timeouts.create)
    _put(out, "delete", timeouts.delete)
    _put(out, "update", timeouts.update)
    return out


def _options(options: program_api.Options) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _put(out, "additionalSecretOutputs", options.additional_secret_outputs)
    _put(out, "aliases", options.aliases)
    if options.custom_timeouts is not None:
        out["customTimeouts"] = _timeouts(options.custom_timeouts)
    _put(out, "deleteBeforeReplace", options.delete_before_replace)
    _put(out, "dependsOn", options.depends_on)
    _put(out, "ignoreChanges", options.ignore_changes)
    _put(out, "import", options.import_)
    if options.parent is not None:
        out["parent"] = options.parent
    _put(out, "protect", options.protect)
    if options.provider is not None:
        out["provider"] = options.provider
    _put(out, "providers", options.providers)
    _put(out, "version", options.version)
    return out


def _resource(resource: program_api.Resource) -> dict[str, Any]:
    out: dict[str, Any] = {"type": resource.type}
    _put(out, "properties", resource.properties)
    if resource.options is not None:
        out["options"] = _options(resource.options)
    if resource.get is not None:
        getter: dict[str, Any] = {"id": resource.get.id}
        _put(getter, "state", resource.get.state)
        out["get"] = getter
    return out


def _configuration(config: program_api.Configuration) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _put(out, "type", config.type)
    if config.default is not None:
        out["default"] = config.default
    return out


def project(program: program_api.Program) -> dict[str, Any]:
    """The Pulumi YAML project document of a Program (plain JSON values, unordered)."""
    doc: dict[str, Any] = {"name": program.metadata.name or "", "runtime": PROJECT_RUNTIME}
    spec = program.program
    if spec is None:
        return doc
    if spec.configuration:
        doc["configuration"] = {key: _configuration(value) for key, value in spec.configuration.items()}
    if spec.resources:
        doc["resources"] = {key: _resource(value) for key, value in spec.resources.items()}
    _put(doc, "variables", spec.variables)
    _put(doc, "outputs", spec.outputs)
    _put(doc, "packages", spec.packages)
    return doc


# --- YAML, as sigs.k8s.io/yaml writes it --------------------------------------------------------------------------


def _number(text: str, start: int, seed: int) -> tuple[int, int]:
    """The digit run starting at ``start`` read as a number (on top of ``seed``) and the index after it."""
    end, value = start, seed
    while end < len(text) and text[end].isdecimal():
        value = value * 10 + ord(text[end]) - ord("0")
        end += 1
    return value, end


def _go_yaml_less(a: str, b: str) -> bool:
    """go-yaml v2's map key order: rune by rune, non-letters before letters, digit runs compared as numbers."""
    for i in range(min(len(a), len(b))):
        if a[i] == b[i]:
            continue
        a_letter, b_letter = a[i].isalpha(), b[i].isalpha()
        if a_letter and b_letter:
            return a[i] < b[i]
        if a_letter or b_letter:
            return b_letter
        seed = 0
        if a[i] == "0" or b[i] == "0":
            # A zero inside a number that already has a non-zero digit is not a leading zero.
            j = i - 1
            while j >= 0 and a[j].isdecimal():
                if a[j] != "0":
                    seed = 1
                    break
                j -= 1
        a_num, a_end = _number(a, i, seed)
        b_num, b_end = _number(b, i, seed)
        if a_num != b_num:
            return a_num < b_num
        if a_end != b_end:
            return a_end < b_end
        return a[i] < b[i]
    return len(a) < len(b)


def _compare(a: str, b: str) -> int:
    if _go_yaml_less(a, b):
        return -1
    if _go_yaml_less(b, a):
        return 1
    return 0


go_yaml_key = functools.cmp_to_key(_compare)
"""Sort key putting map keys in go-yaml v2 order."""


def _ordered(value: Any) -> Any:
    """A copy of a JSON value with every mapping's keys in go-yaml order."""
    if isinstance(value, dict):
        return {key: _ordered(value[key]) for key in sorted(value, key=lambda k: go_yaml_key(str(k)))}
    if isinstance(value, list):
        return [_ordered(item) for item in value]
    return value


class _Dumper(yaml.SafeDumper):
    """Block style, no anchors (repeated values are written out), multi-line strings as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _represent_str)


class _FastDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """:class:`_Dumper` with libyaml's emitter (written in C) where PyYAML was built with it."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_FastDumper.add_representer(str, _represent_str)

#: A string both emitters write alike: printable ASCII, line breaks only between non-empty lines.
_PLAIN = re.compile(r"[\x20-\x7e]*(?:\n[\x20-\x7e]+)*")
#: PyYAML's emitter writes a longer mapping key as a complex key (``? key``); libyaml's does not always.
_SIMPLE_KEY = 128


def plain(value: Any) -> bool:
    """Whether libyaml's emitter writes `value` byte for byte as PyYAML's own does: every string :data:`_PLAIN`,
    every mapping key a non-empty one-line string shorter than :data:`_SIMPLE_KEY` (or not a string at all).

    Why the two: PyYAML's emitter is pure Python, 0.4 ms for a small Program (nearly all of building its artifact),
    libyaml's a sixth of that; but they differ at the edges (non-ASCII and control characters, empty and long keys,
    a block scalar that keeps trailing newlines), and a Program's artifact must not change its bytes, and so its
    digest, when pko is upgraded. Inside these bounds a fuzzer found no difference in 100,000 documents
    (tests/unit/sources/test_program_artifact.py repeats a seeded part of it); anything else takes PyYAML's."""
    kind = type(value)
    if kind is str:
        return _PLAIN.fullmatch(value) is not None
    if kind is dict:
        return all((type(k) is not str or (0 < len(k) < _SIMPLE_KEY and "\n" not in k and plain(k))) and plain(v)
                   for k, v in value.items())
    if kind is list:
        return all(plain(item) for item in value)
    return True


def render(doc: dict[str, Any]) -> bytes:
    """The YAML text of a project document: keys sorted as go-yaml sorts them, no line folding."""
    ordered = _ordered(doc)
    text = yaml.dump(ordered, Dumper=_FastDumper if plain(ordered) else _Dumper, sort_keys=False,
                     default_flow_style=False, allow_unicode=True, width=2**31 - 1)
    return text.encode("utf-8")


# --- the archive ---------------------------------------------------------------------------------------------------


def pack(content: bytes, name: str = PROJECT_FILE) -> bytes:
    """A ``.tar.gz`` holding one regular file: the same bytes for the same content, always."""
    info = tarfile.TarInfo(name)
    info.size = len(content)
    info.mode = FILE_MODE
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    header = info.tobuf(format=tarfile.USTAR_FORMAT, encoding="utf-8", errors="strict")
    padding = b"\0" * (-len(content) % _BLOCK)
    archive = header + content + padding + b"\0" * (2 * _BLOCK)  # two zero blocks end the archive, as Go writes it
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=COMPRESS_LEVEL, mtime=0) as stream:
        stream.write(archive)
    return buffer.getvalue()


def digest_of(data: bytes) -> str:
    """The OCI-style digest Flux verifies: ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build(program: program_api.Program) -> Artifact:
    """The artifact of a Program: made once for each Program (uid) and generation, kept while the kept ones weigh
    at most :data:`KEPT_BYTES`, the least recently used given up first.

    Why kept: the Program controller builds it for the digest it publishes, and the file server again when the
    workspace fetches it, a few tenths of a millisecond each in PyYAML's emitter. What it is made of, the Program's
    name and spec, cannot change without a new uid or generation, so the same key is the same bytes. A Program the
    API server did not make (no uid or generation) is built every time."""
    meta = program.metadata
    key = (meta.uid, meta.generation) if meta.uid and meta.generation is not None else None
    found = _kept.get(key) if key is not None else None
    if found is not None:
        _kept.move_to_end(key)
        return found
    data = pack(render(project(program)))
    made = Artifact(data, digest_of(data))
    if key is not None:
        _keep(key, made)
    return made


KEPT_BYTES = 2 << 20
"""What the kept artifacts may weigh, each counted as its bytes and :data:`ENTRY_BYTES`. By weight, not by count:
a fleet's Program is built when it is applied and fetched when its Stack's workspace first runs, which in a fleet
larger than the pool of active workspaces comes many minutes and hundreds of Programs later (1,000 small ones
weigh about 0.7 MB here, where 256 kept by count made three quarters of them build twice)."""

ENTRY_BYTES = 400
"""A kept artifact's weight besides its bytes: its key, digest and the cache's own entry."""

_kept: collections.OrderedDict[object, Artifact] = collections.OrderedDict()
_weight = [0]  # what the kept artifacts weigh (:data:`KEPT_BYTES`)


def _keep(key: object, made: Artifact) -> None:
    _kept[key] = made
    _weight[0] += made.size + ENTRY_BYTES
    while _weight[0] > KEPT_BYTES and len(_kept) > 1:
        _, dropped = _kept.popitem(last=False)
        _weight[0] -= dropped.size + ENTRY_BYTES
