"""The API server and etcd restarted (same data directory) while Stacks reconcile: the operator's watches resume —
across an etcd compaction made while the API server was down, so the resourceVersions the informers hold are gone
and they must relist (410 Gone) — no generation's `up` runs twice, nothing is left locked, and the elected leader
keeps its Lease (or, if it lost it, exits so that a restart takes over: never two leaders' work at once)."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

from pko.kube import client as kclient
from pko.testing import controlplane
from pko.testing.waiting import eventually

from . import chaos


def _compact(etcd_url: str) -> int:
    """Compact etcd to its current revision (the v3 HTTP gateway): every older resourceVersion is now too old."""
    def post(path: str, body: dict[str, object]) -> dict[str, object]:
        request = urllib.request.Request(f"{etcd_url}{path}", data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            return dict(json.loads(response.read()))

    header = post("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]
    revision = int(header["revision"])  # type: ignore[index]
    post("/v3/kv/compaction", {"revision": revision, "physical": True})
    return revision


def _restart_with_compaction(cp: controlplane.ControlPlane) -> int:
    cp.process("kube-apiserver").halt()
    cp.restart("etcd")
    revision = _compact(cp.etcd_url)
    cp.restart("kube-apiserver")
    return revision


async def test_api_server_and_etcd_restart_mid_reconcile(
    chaos_plane: controlplane.ControlPlane, ckc: kclient.Client, cns: str, tmp_path: Path,
    operators: Callable[..., chaos.OperatorProcess],
) -> None:
    op = operators("--leader-elect")
    op.start()
    await op.ready()
    fleet = await chaos.create_fleet(ckc, cns, tmp_path, 2)
    await chaos.wait_converged(ckc, fleet, 0, timeout=300, diagnostics=op.tail)

    await chaos.start_round(ckc, fleet, 1)

    async def any_in_flight() -> bool:
        return bool(await chaos.in_flight(ckc, cns))

    await eventually(any_in_flight, "an Update in flight", 120, interval=0.05)
    revision = await asyncio.to_thread(_restart_with_compaction, chaos_plane)
    print(f"restarted etcd and kube-apiserver; compacted at revision {revision}")
    if not op.alive():  # it lost its Lease during the outage: it must have said so, and a restart takes over
        assert "leader" in op.tail().lower(), op.tail()
        op.start()
        await op.ready()
    await chaos.wait_converged(ckc, fleet, 1, timeout=300, diagnostics=op.tail)

    # The watches resumed: a change made now (after the relist) is seen without any resync.
    await chaos.start_round(ckc, fleet, 2)
    await chaos.wait_converged(ckc, fleet, 2, timeout=300, diagnostics=op.tail)
    # A reconcile failing to reach the API server logs one line (tests/unit/runtime/test_reconcile_log_fields.py);
    # some other path still logs a traceback during the outage (not yet identified), so no assertion on that here.
    tally = chaos.Tally(rounds=2)
    chaos.count_backends(fleet, tally)
    assert tally.duplicated == 0, "\n".join(tally.details)
    assert tally.locked == 0, "\n".join(tally.details)
    assert await op.terminate() == 0, op.tail()
    assert await chaos.wait_no_orphans(operators.run, []) == []  # type: ignore[attr-defined]
