"""Program artifacts are deterministic tarballs of the Pulumi YAML project the Go operator would write."""

from __future__ import annotations

import copy
import gzip
import hashlib
import io
import random
import tarfile
from typing import Any

import yaml

from pko.api import program as program_api
from pko.sources import program as artifacts

STATICWEBSITE: dict[str, Any] = {
    "apiVersion": "pulumi.com/v1",
    "kind": "Program",
    "metadata": {"name": "staticwebsite", "namespace": "default", "generation": 1},
    "program": {
        "configuration": {
            "indexContent": {"type": "String", "default": "<html><body><p>Hello world!</p></body></html>"},
            "replicas": {"type": "Number", "default": 0},
            "ports": {"type": "List<Number>"},
            "prefix": {"default": "site-"},
        },
        "packages": {"aws": "6.66.0"},
        "resources": {
            "bucket": {
                "type": "aws:s3:BucketV2",
                "properties": {"bucketPrefix": "${prefix}"},
                "options": {"protect": False, "deleteBeforeReplace": True, "ignoreChanges": [],
                            "customTimeouts": {"create": "5m", "update": ""}, "import": ""},
            },
            "index.html": {
                "type": "aws:s3:BucketObject",
                "properties": {"bucket": "${bucket.id}", "content": "${indexContent}", "key": "index.html"},
                "options": {"parent": "${bucket}", "dependsOn": ["${bucket}"], "additionalSecretOutputs": ["content"]},
            },
            "existing": {"type": "aws:s3:BucketV2", "get": {"id": "existing-bucket"}},
            "empty-options": {"type": "aws:s3:BucketV2", "options": {}},
        },
        "variables": {"caller": {"fn::invoke": {"function": "aws:getCallerIdentity", "return": "accountId"}}},
        "outputs": {"bucketName": "${bucket.id}", "enabled": "true", "zero": 0, "nothing": None},
    },
}


def _program(obj: dict[str, Any]) -> program_api.Program:
    return program_api.Program.model_validate(copy.deepcopy(obj))


def _members(data: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        out = []
        for member in tar.getmembers():
            extracted = tar.extractfile(member)
            assert extracted is not None
            out.append((member, extracted.read()))
        return out


def _project_file(data: bytes) -> str:
    [(_, content)] = _members(data)
    return content.decode("utf-8")


def test_same_program_gives_the_same_bytes_and_digest() -> None:
    first = artifacts.build(_program(STATICWEBSITE))
    second = artifacts.build(_program(STATICWEBSITE))
    assert first.data == second.data
    assert first.digest == second.digest == "sha256:" + hashlib.sha256(first.data).hexdigest()
    assert first.size == len(first.data)


def test_map_order_in_the_object_does_not_matter() -> None:
    reordered = copy.deepcopy(STATICWEBSITE)
    reordered["program"] = dict(reversed(list(reordered["program"].items())))
    reordered["program"]["resources"] = dict(reversed(list(reordered["program"]["resources"].items())))
    assert artifacts.build(_program(reordered)).data == artifacts.build(_program(STATICWEBSITE)).data


def test_different_content_gives_a_different_digest_and_generation_alone_does_not() -> None:
    base = artifacts.build(_program(STATICWEBSITE))
    changed = copy.deepcopy(STATICWEBSITE)
    changed["program"]["outputs"]["bucketName"] = "${bucket.bucket}"
    assert artifacts.build(_program(changed)).digest != base.digest
    renamed = copy.deepcopy(STATICWEBSITE)
    renamed["metadata"]["name"] = "otherwebsite"
    assert artifacts.build(_program(renamed)).digest != base.digest
    # The archive holds the project only; the generation is in the URL and revision, not in the bytes.
    regenerated = copy.deepcopy(STATICWEBSITE)
    regenerated["metadata"]["generation"] = 7
    assert artifacts.build(_program(regenerated)).digest == base.digest


def test_archive_is_one_pulumi_yaml_with_fixed_metadata() -> None:
    data = artifacts.build(_program(STATICWEBSITE)).data
    [(member, _)] = _members(data)
    assert member.name == "Pulumi.yaml"
    assert member.isreg()
    assert member.mode == 0o775
    assert (member.mtime, member.uid, member.gid, member.uname, member.gname) == (0, 0, 0, "", "")
    # gzip header: deflate, no flags (no file name), mtime 0.
    assert data[:4] == b"\x1f\x8b\x08\x00"
    assert data[4:8] == b"\x00\x00\x00\x00"
    raw = gzip.decompress(data)
    assert raw[257:265] == b"ustar\x0000"
    assert len(raw) % 512 == 0
    assert raw.endswith(b"\0" * 1024)


def test_pulumi_yaml_is_the_project_with_go_omitempty() -> None:
    project = yaml.safe_load(_project_file(artifacts.build(_program(STATICWEBSITE)).data))
    assert project == {
        "name": "staticwebsite",
        "runtime": "yaml",
        "configuration": {
            "indexContent": {"type": "String", "default": "<html><body><p>Hello world!</p></body></html>"},
            "replicas": {"type": "Number", "default": 0},
            "ports": {"type": "List<Number>"},
            "prefix": {"default": "site-"},
        },
        "packages": {"aws": "6.66.0"},
        "resources": {
            "bucket": {
                "type": "aws:s3:BucketV2",
                "properties": {"bucketPrefix": "${prefix}"},
                "options": {"deleteBeforeReplace": True, "customTimeouts": {"create": "5m"}},
            },
            "index.html": {
                "type": "aws:s3:BucketObject",
                "properties": {"bucket": "${bucket.id}", "content": "${indexContent}", "key": "index.html"},
                "options": {"parent": "${bucket}", "dependsOn": ["${bucket}"], "additionalSecretOutputs": ["content"]},
            },
            "existing": {"type": "aws:s3:BucketV2", "get": {"id": "existing-bucket"}},
            "empty-options": {"type": "aws:s3:BucketV2", "options": {}},
        },
        "variables": {"caller": {"fn::invoke": {"function": "aws:getCallerIdentity", "return": "accountId"}}},
        "outputs": {"bucketName": "${bucket.id}", "enabled": "true", "zero": 0, "nothing": None},
    }


def test_pulumi_yaml_text_is_pinned() -> None:
    obj = {
        "metadata": {"name": "hello", "namespace": "ns", "generation": 3},
        "program": {
            "configuration": {"greeting": {"type": "String", "default": "hi"}},
            "variables": {"item10": 10, "item9": "9", "Zed": "yes", "a_b": ["x", {"k": "line1\nline2\n"}]},
            "outputs": {"message": "${greeting}, world"},
        },
    }
    assert _project_file(artifacts.build(_program(obj)).data) == (
        "configuration:\n"
        "  greeting:\n"
        "    default: hi\n"
        "    type: String\n"
        "name: hello\n"
        "outputs:\n"
        "  message: ${greeting}, world\n"
        "runtime: yaml\n"
        "variables:\n"
        "  Zed: 'yes'\n"
        "  a_b:\n"
        "  - x\n"
        "  - k: |\n"
        "      line1\n"
        "      line2\n"
        "  item9: '9'\n"
        "  item10: 10\n"
    )


def test_program_without_a_body_is_name_and_runtime() -> None:
    obj = {"metadata": {"name": "bare", "namespace": "ns", "generation": 1}}
    assert yaml.safe_load(_project_file(artifacts.build(_program(obj)).data)) == {"name": "bare", "runtime": "yaml"}


def test_keys_sort_as_go_yaml_sorts_them() -> None:
    keys = ["item10", "item9", "b", "B", "a_b", "aB", "index.html", "indexContent", "10", "9", "a01", "a1", "x"]
    ordered = sorted(keys, key=artifacts.go_yaml_key)
    assert ordered == ["9", "10", "B", "a_b", "a1", "a01", "aB", "b", "index.html", "indexContent", "item9", "item10",
                       "x"]


def test_built_once_for_each_uid_and_generation(monkeypatch: Any) -> None:
    """The controller's digest and the file server's bytes come from one build of a Program's generation; a new
    generation or another Program is built anew, and one without a uid every time."""
    renders: list[str] = []
    render = artifacts.render
    monkeypatch.setattr(artifacts, "render", lambda doc: renders.append(doc["name"]) or render(doc))
    made = copy.deepcopy(STATICWEBSITE)
    made["metadata"] |= {"uid": "u-static-1", "generation": 3}
    first = artifacts.build(_program(made))
    assert artifacts.build(_program(made)) is first
    assert len(renders) == 1
    changed = copy.deepcopy(made)
    changed["metadata"]["generation"] = 4
    changed["program"]["outputs"]["bucketName"] = "${bucket.bucket}"
    assert artifacts.build(_program(changed)).digest != first.digest
    other = copy.deepcopy(made)
    other["metadata"] |= {"uid": "u-static-2", "name": "otherwebsite"}
    assert artifacts.build(_program(other)).digest != first.digest
    artifacts.build(_program(STATICWEBSITE))
    artifacts.build(_program(STATICWEBSITE))
    assert len(renders) == 5


def test_artifacts_are_kept_by_weight_least_recently_used_first(monkeypatch: Any) -> None:
    monkeypatch.setattr(artifacts, "_kept", type(artifacts._kept)())
    monkeypatch.setattr(artifacts, "_weight", [0])
    made = {}
    for uid in ("a", "b", "c"):
        program = copy.deepcopy(STATICWEBSITE)
        program["metadata"] |= {"uid": uid}
        made[uid] = _program(program)
    one = artifacts.build(made["a"]).size + artifacts.ENTRY_BYTES
    monkeypatch.setattr(artifacts, "KEPT_BYTES", 2 * one)  # the weight of two of them
    artifacts.build(made["b"])
    artifacts.build(made["a"])  # used again: "b" is now the least recently used
    artifacts.build(made["c"])
    assert [key[0] for key in artifacts._kept] == ["a", "c"]  # type: ignore[index]
    assert artifacts._weight[0] == 2 * one


def test_a_fleets_programs_are_all_kept(monkeypatch: Any) -> None:
    """1,000 small Programs, each built when applied and again when its Stack's workspace fetches it, minutes and
    hundreds of Programs later: none is rendered twice (256 kept by count rendered three quarters of them twice)."""
    monkeypatch.setattr(artifacts, "_kept", type(artifacts._kept)())
    monkeypatch.setattr(artifacts, "_weight", [0])
    renders: list[str] = []
    render = artifacts.render
    monkeypatch.setattr(artifacts, "render", lambda doc: renders.append(doc["name"]) or render(doc))
    fleet = [program_api.Program.model_validate({
        "apiVersion": "pulumi.com/v1", "kind": "Program",
        "metadata": {"name": f"s{i:04d}", "namespace": "fleet", "uid": f"u-{i}", "generation": 1},
        "program": {"configuration": {"greeting": {"type": "String"}}, "outputs": {"greeting": "${greeting}"}},
    }) for i in range(1000)]
    digests = [artifacts.build(program).digest for program in fleet]  # the controller publishes them
    assert [artifacts.build(program).digest for program in fleet] == digests  # the file server serves them
    assert len(renders) == 1000


def _pyyaml(doc: dict[str, Any]) -> str:
    """The project text as PyYAML's own (pure Python) emitter writes it: what every artifact's bytes were made of."""
    return yaml.dump(artifacts._ordered(doc), Dumper=artifacts._Dumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=2**31 - 1)


_WORDS = ["true", "no", "~", "1", "1.5", "0x1F", ".inf", "2001-12-14", "12:30", "", " ", "-", "---", "...", "<<",
          "  lead", "trail  ", "a\n", "\n", "a\n\n", "\na", " \na", "a \nb", "a\n b", "${r.result}", "a: b", "- x",
          "#c", "a #b", "x" * 130, "é", "日本", "\t", "😀", "\x85"]


def _value(r: random.Random, depth: int) -> Any:
    pick = r.random()
    if depth > 3 or pick < 0.5:
        kind = r.random()
        if kind < 0.6:
            return r.choice(_WORDS) if r.random() < 0.4 else "".join(
                r.choice([chr(c) for c in range(0x20, 0x7F)] + ["\n"]) for _ in range(r.randint(0, 12)))
        if kind < 0.7:
            return r.randint(-10**20, 10**20)
        if kind < 0.8:
            return r.choice([0.0, -0.0, 1.5, 1e300, float("inf"), 0.1])
        return r.choice([True, False, None, []])
    if pick < 0.75:
        return [_value(r, depth + 1) for _ in range(r.randint(0, 4))]
    return {str(_value(r, 4)): _value(r, depth + 1) for _ in range(r.randint(0, 4))}


def test_the_fast_emitter_writes_a_plain_document_as_pyyaml_does_and_others_are_left_to_pyyaml() -> None:
    """libyaml's emitter (C) writes the project where it is known to agree with PyYAML's, byte for byte: a Program's
    artifact, and its digest, stay what they were. A seeded part of the fuzzing behind :func:`artifacts.plain`."""
    plain = other = 0
    for seed in range(3000):
        r = random.Random(seed)
        doc = {str(_value(r, 4)): _value(r, 0) for _ in range(r.randint(1, 6))}
        expected = _pyyaml(doc)
        assert artifacts.render(doc).decode() == expected, doc
        if artifacts.plain(artifacts._ordered(doc)):
            plain += 1
            fast = yaml.dump(artifacts._ordered(doc), Dumper=artifacts._FastDumper, sort_keys=False,
                             default_flow_style=False, allow_unicode=True, width=2**31 - 1)
            assert fast == expected, doc
        else:
            other += 1
    assert plain > 300  # both paths were taken
    assert other > 300


def test_where_the_emitters_differ_the_document_is_not_plain() -> None:
    """Each of these is written differently by libyaml's emitter (an empty key, a key of 130 characters, a kept
    trailing newline, non-ASCII text, a control character): PyYAML's writes them, as before."""
    for doc in ({"": 1}, {"k" * 130: 1}, {"a": {"b": "x\n\n"}}, {"a": "😀"}, {"a": "x\x85y"}, {"a": ["é"]}):
        assert not artifacts.plain(artifacts._ordered(doc)), doc
        assert artifacts.render(doc).decode() == _pyyaml(doc)
    assert artifacts.plain(artifacts._ordered(artifacts.project(program_api.Program.model_validate(STATICWEBSITE))))
