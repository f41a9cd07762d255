"""Kubernetes label selectors (``matchLabels`` and ``matchExpressions``) matched against labels.

Why here: a StackRollout picks its Stacks with one selector and splits them into waves with others; the rollout's
plan matches labels itself (on the Stacks it read), so it must read a selector exactly as the API server does (all
terms must hold; an empty selector matches everything).

Pure. Must never accept an operator the API server refuses (it answers ValueError instead).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _expressions(selector: Mapping[str, Any]) -> list[tuple[str, str, list[str]]]:
    found = []
    for term in selector.get("matchExpressions") or []:
        operator = str(term.get("operator", ""))
        if operator not in _OPERATORS:
            raise ValueError(f"{operator!r} is not a valid label selector operator")
        found.append((str(term.get("key", "")), operator, [str(v) for v in term.get("values") or []]))
    return found


def matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether `labels` satisfy every term of `selector`."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for key, operator, values in _expressions(selector):
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True

