"""Graphs at scale (issue 32): the scheduler walks a pending graph iteratively and plans it with a
buffer-to-step index, and dropping a graph releases it without recursion, so long chains neither
overflow the C stack nor take quadratic time (docs/architecture.md, "The walk and the index").

Core tier: a chain of 10^5 ops that cannot fuse (a handle on every intermediate; fusion off)
realizes with the right values, one of 2*10^5 ops dropped unrealized frees everything, explain
walks 3*10^4 unfusable steps, and the scheduler's work (tgrad_debug_schedule_work: a count, never a
timing) per step and read stays constant from 10^3 to 10^5 steps. Slow tier: 10^6 ops, kept,
fused and dropped. tests/c/test_schedule_scale.c checks the order and the memory plan against the
recursive walk and the quadratic planner on random graphs.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import tgrad
from tgrad._ffi import ffi, lib

CORE = 100_000


def _value(k: int) -> float:
    """The chain's value after k ops: +1, neg, +1, neg, ... from 0.5 (exact in bf16, period 4)."""
    return (0.5, 1.5, -1.5, -0.5)[k % 4]


def _chain(n: int, *, keep: bool) -> tuple[tgrad.Tensor, list[tgrad.Tensor]]:
    """n ops from a [1, 2] tensor of 0.5; every intermediate in the list when keep (so none fuses)."""
    one = tgrad.Tensor.from_numpy(np.ones((1, 2), np.float32))
    y = tgrad.Tensor.from_numpy(np.full((1, 2), 0.5, np.float32))
    kept = [y] if keep else []
    for i in range(n):
        y = -y if i % 2 else y + one
        if keep:
            kept.append(y)
    return y, kept


def _work() -> dict[str, int]:
    w = ffi.new("int64_t[]", int(lib.TGRAD_DEBUG_WORK_COUNT))
    assert lib.tgrad_debug_schedule_work(w, lib.TGRAD_DEBUG_WORK_COUNT) == 0
    return {"steps": w[0], "reads": w[1], "probes": w[2], "release_checks": w[3]}


@pytest.fixture()
def fusion_off() -> Iterator[None]:
    tgrad.set_fusion(False)
    try:
        yield
    finally:
        tgrad.set_fusion(True)


def _holds(t: tgrad.Tensor, k: int) -> bool:
    return bool(np.all(t.numpy() == _value(k)))


def test_an_unfusable_chain_with_every_handle_kept_realizes() -> None:
    end, kept = _chain(CORE, keep=True)
    end.realize()
    work = _work()
    assert work["steps"] == CORE and work["release_checks"] == CORE
    assert _holds(end, CORE)
    assert all(_holds(kept[k], k) for k in range(0, CORE + 1, 997))


def test_a_chain_with_fusion_off_realizes(fusion_off: None) -> None:
    end, _ = _chain(CORE, keep=False)
    end.realize()
    assert _work()["steps"] == CORE
    assert _holds(end, CORE)


def test_a_dropped_unrealized_chain_frees_every_node() -> None:
    before = tgrad.live_buffers()
    end, _ = _chain(2 * CORE, keep=False)
    assert tgrad.live_buffers() == before + 2 * CORE + 2  # the ops' results, the start and the one
    del end
    assert tgrad.live_buffers() == before


def test_explain_walks_a_long_unfusable_chain() -> None:
    n = 30_000  # the recursive walk overflowed the C stack about here
    end, kept = _chain(n, keep=True)
    steps = [line for line in end.explain().splitlines() if line.startswith("step ")]
    assert len(steps) == n and steps[-1].startswith(f"step {n - 1}: neg ")
    assert not end.is_realized


def test_the_scheduler_work_per_step_is_constant() -> None:
    per = []
    for n in (1_000, 10_000, CORE):
        end, kept = _chain(n, keep=True)
        end.realize()
        w = _work()
        assert w["steps"] == n and w["reads"] == n + n // 2 and w["release_checks"] == n
        per.append(w["probes"] / (w["steps"] + w["reads"]))
        del end, kept
    # about 3.5 per step and read at every length; a scan per step (the old step_of) or per read (the
    # old readers) would make it grow with n, to thousands here
    assert max(per) <= 6, per


@pytest.mark.slow
def test_a_million_op_chain_kept_fused_and_dropped() -> None:
    n = 1_000_000
    end, kept = _chain(n, keep=True)
    end.realize()
    assert _work()["steps"] == n and _holds(end, n) and _holds(kept[n // 2 + 1], n // 2 + 1)
    del end, kept
    end, _ = _chain(n, keep=False)
    end.realize()
    assert _work()["steps"] == (n + 8) // 9  # a step per 9 ops: an op and 8 fused
    assert _holds(end, n)
    del end
    before = tgrad.live_buffers()
    end, _ = _chain(n, keep=False)
    del end
    assert tgrad.live_buffers() == before
