"""The interleaved timing harness: timed regions, the wait for the process's other threads to
sleep, warm-up and sizing, and the rounds that pair every region's samples by repetition.

Nothing here knows what a region computes: a region is a name and a call (with an optional set-up
and undo around it, outside the clock). The clock, the quiet wait and the sleep of a cold region
are fields of each region (time.perf_counter, _wait_quiet and time.sleep by default) so that the
harness can be driven by a fake clock in tests (tests/python/test_bench_timing.py).
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

#: Seconds of measurement per shape when --repeat is not given.
AUTO_BUDGET_S = 2.0
AUTO_MIN_REPEAT, AUTO_MAX_REPEAT = 10, 200
#: Regions whose call takes less than this get an untimed call right before each timed one, so
#: that the library's own threads are awake as in a loop of calls.
HOT_LIMIT_S = 0.05
#: Before each region: wait (polling every QUIET_POLL_S) until no other thread of the process
#: QUIET_TIMEOUT_S. Busy polling: sleeping would let the idle vCPU be descheduled.
QUIET_TIMEOUT_S, QUIET_POLL_S = 0.25, 0.0

Clock = Callable[[], float]
Quiet = Callable[[], "tuple[float, bool]"]
Tick = Callable[[int, int], None]

_TASKS = "/proc/self/task"


def _busy_threads(me: int) -> int | None:
    """Threads of this process other than `me` that are running (state R); None without /proc."""
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return None
    busy = 0
    for tid in tids:
        if tid == str(me):
            continue
        try:
            with open(f"{_TASKS}/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # the thread exited
            continue
        if stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] == b"R":
            busy += 1
    return busy


def _wait_quiet(timeout: float | None = None) -> tuple[float, bool]:
    """Wait until the other threads of this process sleep: after a call, OpenBLAS's workers spin
    for about 0.1 s and torch's OpenMP workers for a few ms, and a spinning thread of one library
    takes a core from the next one timed. Returns (seconds waited, whether it got quiet)."""
    timeout = QUIET_TIMEOUT_S if timeout is None else timeout
    me = threading.get_native_id()
    start = time.perf_counter()
    while True:
        busy = _busy_threads(me)
        waited = time.perf_counter() - start
        if not busy:  # 0, or None where /proc is missing (nothing to wait for then)
            return waited, True
        if waited > timeout:
            return waited, False
        if QUIET_POLL_S:
            time.sleep(QUIET_POLL_S)


@dataclass
class _Timed:
    """One timed region: `call` and the samples of its timed calls, one per round."""

    name: str
    call: Callable[[], Any]
    samples: list[float] = field(default_factory=list)
    hot: bool = False  # one untimed call right before each timed one
    quiet_waits: list[float] = field(default_factory=list)
    quiet_timeouts: int = 0
    clock: Clock = time.perf_counter
    quiet: Quiet = _wait_quiet
    #: Called before the clock starts and after it stops (tgrad_1t: one thread, then T again).
    before: Callable[[], Any] | None = None
    after: Callable[[], Any] | None = None
    #: bench --cold: seconds slept right before each timed call (never hot then); None: warm.
    cold_s: float | None = None
    sleep: Callable[[float], None] = time.sleep

    def once(self) -> float:
        if self.before is not None:
            self.before()
        try:
            start = self.clock()
            result = self.call()
            elapsed = self.clock() - start
        finally:
            if self.after is not None:
                self.after()
        del result  # release outside the timed region
        return elapsed

    def sample(self) -> float:
        """Wait until no other thread of the process runs, then sleep when cold or warm up when
        hot, and time one call."""
        waited, quiet = self.quiet()
        self.quiet_waits.append(waited)
        self.quiet_timeouts += not quiet
        if self.cold_s is not None:
            self.sleep(self.cold_s)
        elif self.hot:
            self.once()
        return self.once()

    def is_hot(self, once_s: float) -> bool:
        """Whether a call of `once_s` seconds gets an untimed call before each timed one."""
        return self.cold_s is None and once_s < HOT_LIMIT_S

    def again(self) -> _Timed:
        """The same region with no samples yet (for a phase of its own)."""
        return _Timed(self.name, self.call, hot=self.hot, clock=self.clock, quiet=self.quiet,
                      before=self.before, after=self.after, cold_s=self.cold_s, sleep=self.sleep)


def balanced_orders(n: int) -> list[list[int]]:
    """A Williams design: orders of range(n) in which every region directly follows every other
    one equally often (once in n orders for even n, twice in 2n for odd n). Rotation alone is a
    Latin square but not balanced this way: there a region always follows the same one."""
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(j + i) % n for j in first] for i in range(n)]
    return rows if n % 2 == 0 else rows + [row[::-1] for row in rows]


def _interleaved(timed: list[_Timed], repeat: int, tick: Tick | None = None,
                 balanced: bool = False) -> list[list[str]]:
    """`repeat` rounds; round i runs every region once, starting at region i mod len(timed), or,
    `balanced`, in order i mod len(orders) of balanced_orders: with rotation a region always
    follows the same one, and what that one leaves in the caches shows in a call of a few
    microseconds (bench --cold: "tgrad 1 thread" always followed the whole-call region, another
    tgrad call, "tgrad" a peer, and 64³ and smaller measured 4-8% faster at one thread for it).
    Garbage collection is off meanwhile. Returns each round's order of region names."""
    rows = balanced_orders(len(timed)) if balanced and timed else None
    orders = []
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for i in range(repeat):
            if rows is None:
                shift = i % len(timed)
                order = timed[shift:] + timed[:shift]
            else:
                order = [timed[j] for j in rows[i % len(rows)]]
            for t in order:
                t.samples.append(t.sample())
            orders.append([t.name for t in order])
            if tick is not None:
                tick(i + 1, repeat)
    finally:
        if was_enabled:
            gc.enable()
    return orders


def _auto_repeat(round_s: float, budget_s: float) -> int:
    """Rounds that fill about `budget_s` at `round_s` each, within AUTO_MIN/MAX_REPEAT."""
    return int(min(AUTO_MAX_REPEAT, max(AUTO_MIN_REPEAT, math.ceil(budget_s / max(round_s, 1e-9)))))


def warm_up(timed: list[_Timed], clock: Clock = time.perf_counter) -> float:
    """Two warm-up rounds (first touch, thread pools, caches, JIT), not recorded; the second one
    decides which regions are hot (never a cold one). Returns the seconds a round of the timed
    loop will take (a cold region's sleep included)."""
    for t in timed:
        t.quiet()
        t.once()
    start = clock()
    hot_s = 0.0
    for t in timed:
        t.quiet()
        once = t.once()
        t.hot = t.is_hot(once)
        hot_s += once if t.hot else 0.0
        hot_s += t.cold_s or 0.0
    return clock() - start + hot_s


def _separate_phase(peer: _Timed, timed: list[_Timed], repeat: int | None,
                    budget_s: float) -> dict[str, Any]:
    """Time `peer` interleaved with tgrad's regions only (new samples of them, same calls),
    `repeat` rounds or as many as the budget allows (at least AUTO_MIN_REPEAT)."""
    ours = [t for t in timed if t.name in ("tgrad", "tgrad_call")]
    regions = [t.again() for t in ours]
    peer.quiet()
    peer.once()  # warm-up (its compiler, caches), not recorded
    peer.quiet()
    once = peer.once()
    peer.hot = peer.is_hot(once)
    if repeat is None:
        ours_s = sum(2 * statistics.median(t.samples) + (t.cold_s or 0.0) for t in ours)
        round_s = once * (2 if peer.hot else 1) + (peer.cold_s or 0.0) + ours_s
        repeat = _auto_repeat(round_s, budget_s)
    regions.append(peer)
    orders = _interleaved(regions, repeat)
    return {"repeat": repeat, "regions": [t.name for t in regions], "orders": orders,
            "samples": {t.name: list(t.samples) for t in regions},
            "hot": {t.name: t.hot for t in regions}}


def quiet_summary(timed: list[_Timed]) -> dict[str, dict[str, Any]]:
    """Per region: how long it waited for the other threads to sleep, and how often in vain."""
    return {t.name: {"median_wait_s": statistics.median(t.quiet_waits),
                     "max_wait_s": max(t.quiet_waits), "timeouts": t.quiet_timeouts}
            for t in timed}
