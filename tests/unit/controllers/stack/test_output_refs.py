"""Stack outputs as another Stack's config (pko `spec.outputRefs`): which value each reference takes (the
upstream's, else the last update's copy, else missing with a reason that names it), that a value is identified by a
digest that changes with it and with its secrecy, that a changed digest (and only that) makes an update due,
cycles named the same way every time, and the Secret and Workspace config that carry the values."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
from typing import Any

from pko.api import names
from pko.api import stack as stack_api
from pko.controllers.stack import approval, outputrefs, sync
from pko.controllers.stack import workspace as ws_build

NOW = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC)


def _stack(refs: dict[str, Any], name: str = "app", **status: Any) -> stack_api.Stack:
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": "ns", "uid": "u1", "generation": 1},
                            "spec": {"stack": name, "projectRepo": "https://git.example/app", "commit": "c1",
                                     "outputRefs": refs}}
    if status:
        body["status"] = status
    return stack_api.Stack.model_validate(body)


def _ref(stack: str, output: str) -> dict[str, str]:
    return {"stackName": stack, "output": output}


REFS = {"vpcId": {"stackName": "network", "output": "vpcId"},
        "app:dbPassword": {"stackName": "database", "output": "password"},
        "region": {"stackName": "network", "output": "region", "secret": True}}


KEY = b"k" * 32
NONE_KEPT = outputrefs.Kept(KEY, {})


def test_each_reference_takes_the_upstreams_value_and_its_secrecy() -> None:
    offered: dict[str, outputrefs.Outputs | outputrefs.Gone | str] = {
        "network": outputrefs.Outputs({"vpcId": b'"vpc-1"', "region": b'"eu"'}),
        "database": outputrefs.Outputs({"password": b'"hunter2"'}, frozenset({"password"})),
    }
    found = outputrefs.resolve(_stack(REFS), offered, NONE_KEPT)
    assert not found.missing
    assert {k: (v.data, v.secret, v.source) for k, v in found.values.items()} == {
        "vpcId": (b"vpc-1", False, ("network", "vpcId")),
        "app:dbPassword": (b"hunter2", True, ("database", "password")),
        "region": (b"eu", True, ("network", "region"))}  # a secret output, or a reference that asks for one, is one


def test_an_output_name_is_read_as_the_outputs_secret_keeps_it() -> None:
    # the Update's outputs Secret turns what a Secret key cannot hold into '_' (app:url -> app_url)
    offered: dict[str, outputrefs.Outputs | outputrefs.Gone | str] = {
        "network": outputrefs.Outputs({"app_url": b'"https://x"'})}
    found = outputrefs.resolve(_stack({"url": _ref("network", "app:url")}), offered, NONE_KEPT)
    assert found.values["url"].data == b"https://x"


def test_what_is_missing_is_named_and_the_last_copy_fills_in() -> None:
    kept = outputrefs.Kept(KEY, {"app:dbPassword": outputrefs.Value(b"old", True, ("database", "password")),
                                 "vpcId": outputrefs.Value(b"vpc-0", False, ("old-network", "vpcId"))})
    offered: dict[str, outputrefs.Outputs | outputrefs.Gone | str] = {
        "network": 'the last update of Stack "network" (network-1) did not succeed',
        "database": outputrefs.Gone("database-1a2b"),
    }
    found = outputrefs.resolve(_stack(REFS), offered, kept)
    assert found.values["app:dbPassword"] == outputrefs.Value(b"old", True, ("database", "password"))
    # a copy of another Stack's output is not used for this reference (it was repointed)
    assert found.missing == {
        "vpcId": 'the last update of Stack "network" (network-1) did not succeed',
        "region": 'the last update of Stack "network" (network-1) did not succeed'}
    assert outputrefs.waiting_message({"region": 'Stack "network" has no output "region"'}) == (
        'waiting for referenced outputs: config "region": Stack "network" has no output "region"')
    gone = outputrefs.resolve(_stack(REFS), {"network": 'Stack "network" not found',
                                             "database": outputrefs.Gone("database-1a2b")}, NONE_KEPT)
    assert gone.missing["vpcId"] == 'Stack "network" not found'
    assert gone.missing["app:dbPassword"] == ('the outputs of Stack "database"\'s last update (database-1a2b) are '
                                              "gone; its resync is requested")
    absent = outputrefs.resolve(_stack({"x": _ref("network", "nope")}), {"network": outputrefs.Outputs({})},
                                NONE_KEPT)
    assert absent.missing == {"x": 'Stack "network" has no output "nope"'}


def test_a_digest_changes_with_the_value_and_its_secrecy_only_and_needs_the_key() -> None:
    plain, same = outputrefs.Value(b"a", False), outputrefs.Value(b"a", False, ("other", "output"))
    assert plain.digest(KEY) == same.digest(KEY)
    assert len(plain.digest(KEY)) == 16
    assert plain.digest(KEY) != outputrefs.Value(b"b", False).digest(KEY)
    assert plain.digest(KEY) != outputrefs.Value(b"a", True).digest(KEY)
    # keyed: the plain hash of a guessable secret is not what status shows
    assert outputrefs.Value(b"true", True).digest(KEY) != hashlib.sha256(b"s:true").hexdigest()[:16]
    assert plain.digest(KEY) != plain.digest(b"j" * 32)
    assert outputrefs.as_config(b'"text"') == b"text"
    assert outputrefs.as_config(b"5") == b"5"
    assert outputrefs.as_config(b'{"a": [1]}') == b'{"a": [1]}'


def test_only_a_changed_value_makes_an_update_due() -> None:
    last = {"generation": 1, "state": "succeeded", "type": "up", "lastSuccessfulCommit": "c1",
            "lastAttemptedCommit": "c1", "lastResyncTime": "2026-11-28T11:59:00Z",
            "outputRefs": {"vpcId": "1111", "region": "2222"}}
    stack = _stack(REFS, lastUpdate=last)
    assert sync.is_synced(stack, "c1", NOW, output_refs={"vpcId": "1111", "region": "2222"}) == (True, "")
    assert sync.is_synced(stack, "c1", NOW, output_refs={"vpcId": "9999", "region": "2222"}) == (
        False, "Referenced outputs changed: vpcId")
    assert sync.is_synced(stack, "c1", NOW, output_refs={"vpcId": "1111", "region": "2222", "x": "3"}) == (
        False, "Referenced outputs changed: x")
    assert sync.is_synced(stack, "c1", NOW) == (True, "")  # no outputRefs: nothing to compare
    assert outputrefs.changed(None, {}) == []


def test_cycles_are_named_from_the_stack_that_looks() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert outputrefs.cycle("a", edges) == ["a", "b", "c", "a"]
    assert outputrefs.cycle("b", edges) == ["b", "c", "a", "b"]
    assert outputrefs.cycle("d", edges) is None
    assert outputrefs.cycle("self", {"self": {"self"}}) == ["self", "self"]
    assert outputrefs.cycle("x", {"x": {"y"}, "y": {"z"}, "z": {"y"}}) is None  # a cycle it is not part of
    assert outputrefs.cycle_message(["a", "b", "a"]).startswith("spec.outputRefs form a cycle: a → b → a")


def test_the_copy_and_the_workspace_config_carry_the_values() -> None:
    stack = _stack(REFS)
    offered: dict[str, outputrefs.Outputs | outputrefs.Gone | str] = {
        "network": outputrefs.Outputs({"vpcId": b'"vpc-1"', "region": b'"eu"'}),
        "database": outputrefs.Outputs({"password": b'"hunter2"'}, frozenset({"password"})),
    }
    found = outputrefs.resolve(stack, offered, NONE_KEPT)
    secret = outputrefs.copy_secret(stack, found)
    assert secret["metadata"]["name"] == "app-output-refs"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert outputrefs.owned_by(secret, stack)
    assert secret["metadata"]["labels"][names.LABEL_STACK_NAME] == "app"
    assert outputrefs.holds(secret, outputrefs.copy_secret(stack, found))
    again = outputrefs.kept(secret, b"other")  # what the next reconcile reads back: the values and the key
    assert again == outputrefs.Kept(KEY, found.values)
    assert sorted(secret["data"]) == ["digest-key", "value-0", "value-1", "value-2"]  # config keys hold ':'
    carried = outputrefs.carried(stack, found)
    workspace = ws_build.desired(stack, ws_build.Source(git={"url": "u", "ref": "c1"}), carried)
    config = workspace["spec"]["stacks"][0]["config"]
    assert [(c["key"], c["secret"]) for c in config] == [("app:dbPassword", True), ("region", True),
                                                         ("vpcId", False)]
    assert all("json" not in c["valueFrom"] for c in config)  # a string output is the string; others JSON text
    files = {c["key"]: c["valueFrom"]["path"].rpartition("/")[2] for c in config}
    layout = json.loads(secret["metadata"]["annotations"][names.ANNOTATION_OUTPUT_REF_KEYS])
    assert {k: v["file"] for k, v in layout.items()} == files
    assert base64.b64decode(secret["data"][files["vpcId"]]) == b"vpc-1"
    numbers = outputrefs.resolve(_stack({"n": _ref("network", "count"), "o": _ref("network", "tags")}),
                                 {"network": outputrefs.Outputs({"count": b"5", "tags": b'{"a": ["b"]}'})}, NONE_KEPT)
    carried_numbers = outputrefs.copy_secret(stack, numbers)["data"]
    assert [base64.b64decode(carried_numbers[f"value-{i}"]) for i in (0, 1)] == [b"5", b'{"a": ["b"]}']
    volumes = workspace["spec"]["podTemplate"]["spec"]["volumes"]
    assert {"name": outputrefs.VOLUME, "secret": {"secretName": "app-output-refs"}} in volumes
    annotations = workspace["spec"]["podTemplate"]["metadata"]["annotations"]
    assert annotations == {names.ANNOTATION_OUTPUT_REFS_REVISION: carried.revision}
    assert "hunter2" not in json.dumps(workspace)  # values never in the Workspace
    other = outputrefs.resolve(stack, {**offered, "network": outputrefs.Outputs({"vpcId": b'"vpc-2"',
                                                                                 "region": b'"eu"'})}, NONE_KEPT)
    changed = outputrefs.carried(stack, other)
    assert changed.revision != carried.revision  # new values: a new pod template, so a pod that mounts them
    assert not outputrefs.holds(secret, outputrefs.copy_secret(stack, other))
    foreign = secret | {"metadata": secret["metadata"] | {"ownerReferences": []}}
    assert not outputrefs.owned_by(foreign, stack)


def test_a_plan_previewed_with_other_values_is_stale() -> None:
    inputs = approval.Inputs(1, "", "c1", "update", "rev-a")
    review = approval.previewing("app-1", inputs).model_copy(update={"state": approval.AWAITING, "digest": "d" * 64})
    assert review.output_refs == "rev-a"
    assert approval.next_step(review, inputs, [], NOW, 3600).action == approval.Action.WAIT
    step = approval.next_step(review, approval.Inputs(1, "", "c1", "update", "rev-b"), [], NOW, 3600)
    assert step.action == approval.Action.PREVIEW
