"""The bench's interleaved timing harness (tgrad.bench.timing) on its own: fake regions on a fake
clock, so that what is checked is the schedule (rotation, pairing, warm-up, hot calls, quiet
waits, gc) and never a measured time."""

from __future__ import annotations

import collections

import gc
from typing import Any

import pytest

from tgrad.bench import timing
from tgrad.bench.timing import _Timed


class Clock:
    """Time moves only when a fake region runs (or a released result is collected)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.log: list[str] = []

    def __call__(self) -> float:
        return self.now


class Result:
    """What a fake call returns; releasing it costs time, which must fall outside the sample."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def __del__(self) -> None:
        self.clock.now += 100.0


def region(clock: Clock, name: str, cost: float, quiet: tuple[float, bool] = (0.0, True)) -> _Timed:
    def call() -> Result:
        clock.log.append(name)
        clock.now += cost
        return Result(clock)

    def wait() -> tuple[float, bool]:
        clock.log.append("quiet")
        return quiet

    return _Timed(name, call, clock=clock, quiet=wait)


def test_rounds_rotate_the_order_and_pair_the_samples_by_round() -> None:
    clock = Clock()
    timed = [region(clock, "a", 1.0), region(clock, "b", 2.0), region(clock, "c", 3.0)]
    ticks: list[tuple[int, int]] = []
    orders = timing._interleaved(timed, 5, lambda i, n: ticks.append((i, n)))
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"],
                      ["b", "c", "a"]]
    assert [t.samples for t in timed] == [[1.0] * 5, [2.0] * 5, [3.0] * 5]  # release not counted
    assert ticks == [(i, 5) for i in range(1, 6)]
    assert clock.log == ["quiet", "a", "quiet", "b", "quiet", "c",
                         "quiet", "b", "quiet", "c", "quiet", "a",
                         "quiet", "c", "quiet", "a", "quiet", "b",
                         "quiet", "a", "quiet", "b", "quiet", "c",
                         "quiet", "b", "quiet", "c", "quiet", "a"]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7])
def test_balanced_orders_put_every_region_after_every_other_equally_often(n: int) -> None:
    rows = timing.balanced_orders(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n)
    assert all(sorted(row) == list(range(n)) for row in rows)
    follows = collections.Counter((row[j - 1], row[j]) for row in rows for j in range(1, n))
    assert set(follows) == {(a, b) for a in range(n) for b in range(n) if a != b}
    assert len(set(follows.values())) <= 1  # once each (even n), twice each (odd n)


def test_balanced_rounds_follow_the_orders_and_pair_the_samples_by_round() -> None:
    clock = Clock()
    timed = [region(clock, "a", 1.0), region(clock, "b", 2.0), region(clock, "c", 3.0)]
    orders = timing._interleaved(timed, 7, balanced=True)
    rows = timing.balanced_orders(3)
    assert orders == [["abc"[j] for j in rows[i % 6]] for i in range(7)]
    assert [t.samples for t in timed] == [[1.0] * 7, [2.0] * 7, [3.0] * 7]


def test_a_hot_region_gets_an_untimed_call_right_before_its_timed_one() -> None:
    clock = Clock()
    hot, cold = region(clock, "hot", 1.0), region(clock, "cold", 2.0)
    hot.hot = True
    timing._interleaved([hot, cold], 2)
    assert clock.log == ["quiet", "hot", "hot", "quiet", "cold", "quiet", "cold", "quiet", "hot",
                         "hot"]
    assert hot.samples == [1.0, 1.0] and cold.samples == [2.0, 2.0]


def test_quiet_waits_and_timeouts_are_recorded_per_region() -> None:
    clock = Clock()
    slow = region(clock, "slow", 1.0, quiet=(0.3, False))
    fine = region(clock, "fine", 1.0, quiet=(0.01, True))
    timing._interleaved([slow, fine], 3)
    assert slow.quiet_waits == [0.3] * 3 and slow.quiet_timeouts == 3
    assert fine.quiet_waits == [0.01] * 3 and fine.quiet_timeouts == 0
    summary = timing.quiet_summary([slow, fine])
    assert summary["slow"] == {"median_wait_s": 0.3, "max_wait_s": 0.3, "timeouts": 3}
    assert summary["fine"]["timeouts"] == 0


@pytest.mark.parametrize("enabled", [True, False])
def test_gc_is_off_during_the_rounds_and_restored_after(enabled: bool) -> None:
    clock = Clock()
    seen: list[bool] = []
    probe = _Timed("probe", lambda: seen.append(gc.isenabled()), clock=clock,
                   quiet=lambda: (0.0, True))
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        timing._interleaved([probe], 2)
        assert seen == [False, False] and gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_gc_is_restored_when_a_region_fails() -> None:
    def boom() -> None:
        raise RuntimeError("region failed")

    failing = _Timed("boom", boom, quiet=lambda: (0.0, True))
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="region failed"):
        timing._interleaved([failing], 3)
    assert gc.isenabled()


def test_warm_up_runs_two_rounds_and_marks_short_regions_hot() -> None:
    clock = Clock()
    short = region(clock, "short", timing.HOT_LIMIT_S / 2)
    long = region(clock, "long", timing.HOT_LIMIT_S * 2)
    round_s = timing.warm_up([short, long], clock=clock)
    assert clock.log == ["quiet", "short", "quiet", "long"] * 2
    assert short.hot and not long.hot
    assert short.samples == [] and long.samples == []  # nothing recorded
    # the second round (both calls, and the release of both results: 2 * 100 fake seconds), plus
    # the untimed call the hot region will add in each round of the loop
    short_s, long_s = timing.HOT_LIMIT_S / 2, timing.HOT_LIMIT_S * 2
    assert round_s == pytest.approx(2 * 100.0 + short_s + long_s + short_s)


@pytest.mark.parametrize("round_s, budget_s, want", [
    (0.0, 2.0, timing.AUTO_MAX_REPEAT),        # a free round: the cap
    (1e-6, 2.0, timing.AUTO_MAX_REPEAT),
    (0.05, 2.0, 40),                           # budget / round
    (1.0, 2.0, timing.AUTO_MIN_REPEAT),        # too slow for the budget: the minimum
    (0.03, 1.0, 34),                           # rounded up
])
def test_auto_repeat_fills_the_budget_within_its_bounds(round_s: float, budget_s: float,
                                                        want: int) -> None:
    assert timing._auto_repeat(round_s, budget_s) == want


def test_a_separate_peer_pairs_with_new_samples_of_tgrad_only() -> None:
    clock = Clock()
    ours = [region(clock, "tgrad", 1.0), region(clock, "tgrad_call", 2.0)]
    other = region(clock, "numpy_f32", 5.0)
    timing._interleaved(ours + [other], 3)
    before = [list(t.samples) for t in ours]
    clock.log.clear()
    peer = region(clock, "tinygrad_bf16", 7.0)
    phase = timing._separate_phase(peer, ours + [other], 4, budget_s=1.0)
    assert phase["repeat"] == 4 and phase["regions"] == ["tgrad", "tgrad_call", "tinygrad_bf16"]
    assert phase["samples"] == {"tgrad": [1.0] * 4, "tgrad_call": [2.0] * 4,
                                "tinygrad_bf16": [7.0] * 4}
    assert [len(o) for o in phase["orders"]] == [3] * 4 and phase["orders"][1][0] == "tgrad_call"
    assert [t.samples for t in ours] == before  # the main rounds' samples are untouched
    assert "numpy_f32" not in clock.log
    assert clock.log[:4] == ["quiet", "tinygrad_bf16", "quiet", "tinygrad_bf16"]  # its warm-up


def test_a_separate_phase_without_repeat_is_sized_by_its_own_rounds() -> None:
    clock = Clock()
    ours = [region(clock, "tgrad", 0.001)]
    timing._interleaved(ours, 3)
    peer = region(clock, "tinygrad_bf16", 0.5)  # not hot: one call per round
    phase = timing._separate_phase(peer, ours, None, budget_s=2.0)
    # a round: 0.5 (the peer) + 2 * 0.001 (tgrad, hot in the loop) -> 2.0 / 0.502 -> 4 -> minimum
    assert phase["repeat"] == timing.AUTO_MIN_REPEAT


def test_a_region_keeps_its_clock_and_quiet_when_timed_again() -> None:
    clock = Clock()
    first = region(clock, "tgrad", 1.0)
    first.hot = True
    again: Any = first.again()
    assert again.samples == [] and again.hot and again.clock is clock and again.quiet is first.quiet


# ---- bench --cold: a sleep before each timed call, outside the clock; never hot ---------------


def cold_region(clock: Clock, name: str, cost: float, cold_s: float) -> _Timed:
    def sleep(s: float) -> None:
        clock.log.append(f"sleep {s:g}")
        clock.now += s

    t = region(clock, name, cost)
    t.cold_s, t.sleep = cold_s, sleep
    return t


def test_a_cold_region_sleeps_before_each_timed_call_outside_the_clock() -> None:
    clock = Clock()
    cold = cold_region(clock, "cold", 1.0, 0.05)
    cold.hot = True  # even when marked hot: a cold region gets no untimed call
    timing._interleaved([cold], 2)
    assert clock.log == ["quiet", "sleep 0.05", "cold"] * 2
    assert cold.samples == [1.0, 1.0]


def test_warm_up_never_marks_a_cold_region_hot_and_counts_its_sleep() -> None:
    clock = Clock()
    short = cold_region(clock, "short", timing.HOT_LIMIT_S / 2, 0.005)
    round_s = timing.warm_up([short], clock=clock)
    assert clock.log == ["quiet", "short"] * 2  # warm-up calls do not sleep
    assert not short.hot
    assert round_s == pytest.approx(100.0 + timing.HOT_LIMIT_S / 2 + 0.005)


def test_a_cold_region_stays_cold_when_timed_again() -> None:
    clock = Clock()
    cold = cold_region(clock, "cold", 1.0, 0.05)
    again = cold.again()
    assert again.cold_s == 0.05 and again.sleep is cold.sleep


# ---- set-up and undo around the clock (tgrad_1t: one thread for the call) ---------------------


def test_before_and_after_run_around_each_call_outside_the_clock() -> None:
    clock = Clock()
    t = region(clock, "one", 1.0)

    def before() -> None:
        clock.log.append("before")
        clock.now += 10.0

    def after() -> None:
        clock.log.append("after")
        clock.now += 20.0

    t.before, t.after, t.hot = before, after, True
    timing._interleaved([t], 1)
    assert clock.log == ["quiet", "before", "one", "after", "before", "one", "after"]
    assert t.samples == [1.0]
    again = t.again()
    assert again.before is before and again.after is after


def test_after_runs_when_the_call_fails() -> None:
    undone: list[bool] = []

    def boom() -> None:
        raise RuntimeError("boom")

    t = _Timed("x", boom, before=lambda: None, after=lambda: undone.append(True))
    with pytest.raises(RuntimeError):
        t.once()
    assert undone == [True]
