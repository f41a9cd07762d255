"""After :func:`pko.runtime.heap.settle`, what the start made is frozen and the young generation is collected less
often, and a cycle made afterwards is still collected (run in a process of its own: the collector is global)."""

from __future__ import annotations

import json
import subprocess
import sys

from pko.runtime import heap

PROBE = """
import gc, json, weakref
from pko.runtime import heap

class Node:
    pass

before = len(gc.get_objects())
heap.settle()
frozen = gc.get_freeze_count()
a, b = Node(), Node()
a.other, b.other = b, a
gone = weakref.ref(a)
del a, b
found = gc.collect()
print(json.dumps({"before": before, "frozen": frozen, "threshold": gc.get_threshold(), "tracked": len(gc.get_objects()),
                  "collected": found, "cycle_alive": gone() is not None}))
"""


def test_settle_freezes_the_start_and_still_collects_later_cycles() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True).stdout
    seen = json.loads(out)
    assert seen["frozen"] > seen["before"] // 2  # the start's objects are out of the collector's sight
    assert seen["tracked"] < seen["before"] // 2
    assert seen["threshold"][0] == heap.YOUNG > 700
    assert seen["collected"] >= 2
    assert not seen["cycle_alive"]
