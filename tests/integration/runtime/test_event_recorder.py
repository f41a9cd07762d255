"""pko.kube.events.Recorder against the real API server: an event told again is one Event with a count (as
client-go's recorder, which `kubectl describe` shows as "x3 over 2m"), a new message a new Event, and an Event the
API server no longer has is posted again with the count so far."""

from __future__ import annotations

from pko import kube
from pko.kube import events, resources


async def test_an_event_told_again_is_one_event_with_a_count(client: kube.Client, namespace: str) -> None:
    owner = await client.create(resources.CONFIG_MAP.new("told", namespace, data={"a": "1"}))
    recorder = events.Recorder(client, "test-controller")
    for _ in range(3):
        await recorder.warning(owner, "ConnectionFailure", "the agent did not answer")
    await recorder.normal(owner, "Initialized", "Initialized workspace pod")

    found = {e["reason"]: e for e in (await client.list(resources.EVENT, namespace)).items}
    assert sorted(found) == ["ConnectionFailure", "Initialized"]
    failure = found["ConnectionFailure"]
    assert failure["count"] == 3
    assert failure["firstTimestamp"] <= failure["lastTimestamp"]
    assert failure["involvedObject"]["uid"] == owner["metadata"]["uid"]
    assert found["Initialized"]["count"] == 1

    await client.delete(resources.EVENT, failure["metadata"]["name"], namespace)  # as the API server's TTL does
    await recorder.warning(owner, "ConnectionFailure", "the agent did not answer")
    again = [e for e in (await client.list(resources.EVENT, namespace)).items
             if e["reason"] == "ConnectionFailure"]
    assert len(again) == 1
    assert again[0]["count"] == 4
    assert again[0]["firstTimestamp"] == failure["firstTimestamp"]
