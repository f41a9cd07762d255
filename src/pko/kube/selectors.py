"""Label selectors as users type them (``env in (a,b),!sharding.fluxcd.io/key``): parsed, checked and matched here.

Why this exists when the API server parses selectors itself: a selector given to the operator on its command line
must be refused at start-up with a message, not after its first list fails; and a few objects (Programs, which every
shard may read) are filtered in the operator rather than by the watch, so the same selector must match the same
objects here as it does on the server. A StackRollout splits its Stacks into waves by ``metav1.LabelSelector``
objects, read into the same requirements (:func:`of_label_selector`). The grammar is Kubernetes'
(``k8s.io/apimachinery/pkg/labels``): requirements separated by commas, each one of ``key``, ``!key``,
``key=value``, ``key==value``, ``key!=value``, ``key in (v1,v2)``, ``key notin (v1,v2)``; keys and values as label
keys and values are written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"^({_PREFIX}/)?{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")
_SET = re.compile(r"^(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQUAL = re.compile(r"^(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)$")
_EXISTS = re.compile(r"^(?P<neg>!?)\s*(?P<key>[^\s!=(),]+)$")


class SelectorError(ValueError):
    """A selector that does not parse; the message says which part and why."""


def valid_key(key: str) -> bool:
    """A label key: an optional DNS-subdomain prefix (≤253) and ``/``, then a name of at most 63 characters."""
    prefix = key.rpartition("/")[0]
    return bool(_KEY.match(key)) and len(prefix) <= 253


def valid_value(value: str) -> bool:
    """A label value: empty, or at most 63 alphanumerics, ``-``, ``_`` and ``.``, alphanumeric at both ends."""
    return bool(_VALUE.match(value))


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op == "in":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values  # notin (and !=) match a missing label


@dataclass(frozen=True)
class Selector:
    """A parsed selector; the empty one matches everything."""

    text: str
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        found = labels or {}
        return all(r.matches(found) for r in self.requirements)


def _split(text: str) -> list[str]:
    """The requirements of `text`: split at commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in {text!r}")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise SelectorError(f"unbalanced '(' in {text!r}")
    parts.append(current)
    return [p.strip() for p in parts]


def _key(key: str, part: str) -> str:
    if not valid_key(key):
        raise SelectorError(f"{part!r}: {key!r} is not a valid label key (an optional DNS prefix and '/', then at "
                            "most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit)")
    return key


def _value(value: str, part: str) -> str:
    if not valid_value(value):
        raise SelectorError(f"{part!r}: {value!r} is not a valid label value (at most 63 letters, digits, '-', '_' "
                            "or '.', beginning and ending with a letter or digit)")
    return value


def _requirement(part: str) -> Requirement:
    if not part:
        raise SelectorError("an empty requirement (two commas in a row, or one at an end)")
    if found := _SET.match(part):
        values = [v.strip() for v in found["values"].split(",")]
        if values == [""]:
            raise SelectorError(f"{part!r}: a set needs at least one value")
        return Requirement(_key(found["key"], part), found["op"], frozenset(_value(v, part) for v in values))
    if found := _EQUAL.match(part):
        value = _value(found["value"], part)
        return Requirement(_key(found["key"], part), "notin" if found["op"] == "!=" else "in", frozenset({value}))
    if found := _EXISTS.match(part):
        return Requirement(_key(found["key"], part), "!" if found["neg"] else "exists")
    raise SelectorError(f"{part!r} is not a requirement: write key, !key, key=value, key!=value, "
                        "key in (a,b) or key notin (a,b)")


def parse(text: str) -> Selector:
    """`text` parsed, or :class:`SelectorError` naming what is wrong. Blank text is the selector of everything."""
    if not text.strip():
        return Selector("", ())
    return Selector(text.strip(), tuple(_requirement(part) for part in _split(text)))


_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def of_label_selector(selector: Mapping[str, object]) -> Selector:
    """A ``metav1.LabelSelector`` (``matchLabels`` and ``matchExpressions``, as a StackRollout's selectors are
    written) as a :class:`Selector`; :class:`SelectorError` for an operator the API server refuses."""
    requirements: list[Requirement] = []
    labels = selector.get("matchLabels")
    for key, value in sorted((labels if isinstance(labels, Mapping) else {}).items()):
        requirements.append(Requirement(str(key), "in", frozenset({str(value)})))
    expressions = selector.get("matchExpressions")
    for term in expressions if isinstance(expressions, list) else []:
        op = _OPERATORS.get(str(term.get("operator", "")))
        if op is None:
            raise SelectorError(f"{term.get('operator')!r} is not a valid label selector operator")
        requirements.append(Requirement(str(term.get("key", "")), op,
                                        frozenset(str(v) for v in term.get("values") or [])))
    return Selector("", tuple(requirements))
