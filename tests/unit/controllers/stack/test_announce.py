"""StackUpdateDetected once per update decided on (pko.controllers.stack.announce)."""

from __future__ import annotations

from pko.api import stack as stack_api
from pko.controllers.stack import announce
from pko.kube import objects

KEY = objects.ObjectKey("ns", "s")


def _stack(uid: str = "u1") -> stack_api.Stack:
    return stack_api.Stack.model_validate({"metadata": {"name": "s", "namespace": "ns", "uid": uid},
                                         "spec": {"stack": "dev"}})


def _status(last: str | None = None) -> stack_api.StackStatus:
    return stack_api.StackStatus.model_validate({"lastUpdate": {"name": last}} if last else {})


def test_the_same_update_is_announced_once() -> None:
    said = announce.Announced()
    assert said.first(KEY, _stack(), _status(), "Initial stack update")
    assert not said.first(KEY, _stack(), _status(), "Initial stack update")
    assert not said.first(KEY, _stack(), _status(), "Initial stack update")


def test_new_words_a_finished_update_or_a_new_object_announce_again() -> None:
    said = announce.Announced()
    assert said.first(KEY, _stack(), _status(), "Initial stack update")
    assert said.first(KEY, _stack(), _status(), "New stack generation: 2")
    # a retry with the same words after its Update finished is a new decision
    assert said.first(KEY, _stack(), _status("s-1"), "New stack generation: 2")
    assert not said.first(KEY, _stack(), _status("s-1"), "New stack generation: 2")
    # the Stack deleted and made again under its name
    assert said.first(KEY, _stack("u2"), _status("s-1"), "New stack generation: 2")
    # other Stacks are their own
    assert said.first(objects.ObjectKey("ns", "t"), _stack("u3"), _status("s-1"), "New stack generation: 2")


def test_a_forgotten_stack_is_announced_again() -> None:
    said = announce.Announced()
    assert said.first(KEY, _stack(), _status(), "Initial stack update")
    said.forget(KEY)
    assert said.first(KEY, _stack(), _status(), "Initial stack update")
