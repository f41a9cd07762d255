"""The bench's fleet options: a pool for pko on either runtime, and a deadline after which a fleet that cannot
converge (the Go operator's pod per Stack on one node) is reported as it stands; both refused where they mean
nothing, with a message."""

from __future__ import annotations

import pytest

from bench.harness import parse


def test_a_pool_and_a_deadline_are_taken_for_the_fleet_on_the_pod_runtime() -> None:
    args = parse(["fleet", "--stacks", "200", "--max-active-workspaces", "20", "--deadline", "900"])
    assert (args.max_active_workspaces, args.deadline, args.runtime) == (20, 900.0, "pod")
    assert parse(["fleet", "--runtime", "local", "--operators", "pko", "--max-active-workspaces", "5"]
                 ).max_active_workspaces == 5


def test_the_replay_of_pko_1293_takes_a_pool_a_deadline_and_its_sleep() -> None:
    args = parse(["killed", "--operators", "pko", "--stacks", "280", "--max-active-workspaces", "25",
                  "--sleep", "300", "--deadline", "1800"])
    assert (args.max_active_workspaces, args.deadline, args.sleep) == (25, 1800.0, 300.0)


@pytest.mark.parametrize(("argv", "message"), [
    (["idle", "--max-active-workspaces", "20"], "for the fleet and killed scenarios"),
    (["fleet", "--max-active-workspaces", "0"], "at least 1"),
    (["fleet", "--deadline", "0"], "positive"),
    (["latency", "--deadline", "60"], "fleet and killed scenarios on the pod runtime"),
    (["fleet", "--runtime", "local", "--operators", "pko", "--deadline", "60"],
     "fleet and killed scenarios on the pod runtime"),
    (["fleet", "--runtime", "local", "--operators", "pko", "--share-volume", "1Gi"], "for the pod runtime"),
    (["coldstart", "--plugin-images"], "for --program typescript"),
    (["fleet", "--runtime", "local", "--operators", "pko", "--agent-image-volume"], "for the pod runtime"),
])
def test_options_where_they_mean_nothing_are_refused(argv: list[str], message: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)
    assert message in capsys.readouterr().err


def test_a_kept_share_is_taken_for_the_pod_runtime() -> None:
    assert parse(["idle", "--program", "typescript", "--share-volume", "2Gi"]).share_volume == "2Gi"
    assert parse(["idle"]).share_volume is None


def test_plugin_images_are_taken_for_the_realistic_program() -> None:
    assert parse(["coldstart", "--program", "typescript", "--plugin-images"]).plugin_images is True
    assert parse(["coldstart", "--program", "typescript"]).plugin_images is False


def test_the_agent_from_an_image_volume_is_taken_for_the_pod_runtime() -> None:
    assert parse(["coldstart", "--program", "typescript", "--agent-image-volume"]).agent_image_volume is True
    assert parse(["fleet"]).agent_image_volume is False
