"""The bench's profiler on the CPU clock: a busy function is what its samples show, a sleep is not sampled at all,
and the summary counts a frame once a sample however often it recurs."""

from __future__ import annotations

import time

from bench import cpusample


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_the_cpu_clock_samples_work_not_waits() -> None:
    sampler = cpusample.Sampler(interval=0.005)
    sampler.start()
    try:
        time.sleep(0.3)  # on the wall clock this would be 60 samples
        slept = sum(sampler.counts.values())
        _spin(0.3)
    finally:
        sampler.stop()
    spun = sum(n for s, n in sampler.counts.items() if "_spin" in s)
    assert slept <= 3
    assert spun >= 30  # 60 expected; a loaded machine may deliver fewer ticks, never attribute them to the sleep
    assert any(s.endswith(f":_spin:{_spin.__code__.co_firstlineno}") for s in sampler.counts)


def test_a_stack_is_outermost_first_and_cut_at_its_depth() -> None:
    def inner() -> str:
        import sys
        return cpusample.stack(sys._getframe())

    text = inner()
    frames = text.split(";")
    assert frames[-1].endswith(f"inner:{inner.__code__.co_firstlineno}")
    assert "test_a_stack_is_outermost_first" in frames[-2]
    assert len(frames) <= cpusample.DEPTH
    assert " " not in text


def test_top_counts_a_recursive_frame_once_a_sample() -> None:
    collapsed = "a;b;a;c 3\na;d 1\n"
    rows = {name: (incl, own) for name, incl, own in cpusample.top(collapsed)}
    assert rows["a"] == (100.0, 0.0)
    assert rows["c"] == (75.0, 75.0)
    assert rows["d"] == (25.0, 25.0)
    assert cpusample.top("") == []
