"""JSON text the way the reference agent's Go code writes it, so values it hands on compare equal byte for byte.

Go's ``encoding/json`` sorts map keys, writes no spaces, and prints integral doubles without a fraction (``1``, not
``1.0``). Protobuf ``Value`` numbers are doubles, so a config value ``1`` must come out as ``1``.

Pure; never logs.
"""

from __future__ import annotations

import json
import math
from typing import Any


def normalize(value: Any) -> Any:
    """The value with integral finite floats turned into ints, recursively."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


def dumps(value: Any) -> str:
    """Compact JSON with sorted keys, like Go's ``json.Marshal`` of a decoded value."""
    return json.dumps(normalize(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
