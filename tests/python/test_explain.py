"""Explain, route and buffer ids: the plan of a lazy graph, read from Python.

Promises (tgrad.h, "seeing the graph"): one line per kernel with its route, shapes, the operands'
views (composed or materialized), bytes and the buffers allocated and freed; the same plan as
JSON; explaining runs, allocates and changes nothing; an intermediate is freed right after its
last reader; views share their base's buffer id; the route names what computed a buffer.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tgrad
from tgrad import errors


def _t(rng: np.random.Generator, *shape: int) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(rng.standard_normal(shape).astype(np.float32))


def _few_row_routes() -> tuple[str, ...]:
    """Where a product of a few rows may go in the calling thread's order: the packed kernel of the
    order (tgrad.matmul_order_kernel: amx or a variant's block32 kernel, or the pairwise variant),
    or a skinny path (the streaming variant's, in either order)."""
    kernel, stream = tgrad.matmul_order_kernel(), tgrad.cpu_stream_isa()
    return (f"cpu.{kernel}.gemm", f"cpu.{kernel}.skinny", f"cpu.{stream}.skinny", f"cpu.{stream}_block32.skinny")


def test_explain_text_has_one_line_per_kernel(rng: np.random.Generator) -> None:
    a, b, c = _t(rng, 4, 6), _t(rng, 6, 5), _t(rng, 5, 3)
    out = (a @ b) @ c
    text = out.explain()
    steps = [line for line in text.splitlines() if line.startswith("step ")]
    assert len(steps) == 2, text
    for line in steps:
        # 4 and 5 rows: the streaming variant's skinny path where it has one, else packed
        assert "matmul" in line and any(route in line for route in _few_row_routes()), line
        assert re.search(r"reads \d+ B, writes \d+ B", line), line
    assert f"buf#{a.buffer_id}" in steps[0] and f"buf#{b.buffer_id}" in steps[0]
    assert f"buf#{out.buffer_id}" in steps[1] and "(4, 3)" in steps[1]


def test_explain_json_is_the_same_plan(rng: np.random.Generator) -> None:
    a, b, d = _t(rng, 4, 6), _t(rng, 6, 5), _t(rng, 4, 7)
    out = (a @ b).T @ d
    plan = out.explain(json=True)
    assert isinstance(plan, dict)
    steps = plan["steps"]
    assert [s["op"] for s in steps] == ["matmul", "matmul"]
    assert len(steps) == sum(1 for line in out.explain().splitlines() if line.startswith("step "))
    assert steps[1]["output"]["buffer"] == out.buffer_id
    assert steps[1]["output"]["shape"] == [5, 7]
    transposed = steps[1]["inputs"][0]
    assert transposed["buffer"] == steps[0]["output"]["buffer"]
    assert transposed["strides"] == [1, 5] and transposed["load"] == "composed"


def test_an_intermediate_is_freed_after_its_last_reader(rng: np.random.Generator) -> None:
    a, b, c = _t(rng, 4, 6), _t(rng, 6, 5), _t(rng, 5, 3)
    out = (a @ b) @ c  # no handle holds a @ b
    steps = out.explain(json=True)["steps"]
    assert steps[0]["output"]["buffer"] in steps[1]["free_after"]
    np.testing.assert_array_equal(out.numpy(np.float32).shape, (4, 3))


def test_an_intermediate_a_handle_holds_is_not_freed(rng: np.random.Generator) -> None:
    a, b, c = _t(rng, 4, 6), _t(rng, 6, 5), _t(rng, 5, 3)
    ab = a @ b
    out = ab @ c
    steps = out.explain(json=True)["steps"]
    assert ab.buffer_id == steps[0]["output"]["buffer"]
    assert all(ab.buffer_id not in s["free_after"] for s in steps)


def test_explain_runs_and_changes_nothing(rng: np.random.Generator) -> None:
    a, b = _t(rng, 8, 8), _t(rng, 8, 8)
    out = a @ b
    buffers, live_bytes = tgrad.live_buffers(), tgrad.live_bytes()
    first = out.explain()
    assert out.explain() == first and tgrad.explain(out) == first
    assert out.explain(json=True) == tgrad.explain(out, json=True)
    assert not out.is_realized
    assert (tgrad.live_buffers(), tgrad.live_bytes()) == (buffers, live_bytes)


def test_a_realized_tensor_has_nothing_to_run(rng: np.random.Generator) -> None:
    out = (_t(rng, 3, 4) @ _t(rng, 4, 2)).realize()
    assert out.explain(json=True)["steps"] == []
    assert "nothing to run" in out.explain()


def test_a_materialized_reshape_is_a_copy_step(rng: np.random.Generator) -> None:
    x = _t(rng, 4, 6).T[::2].reshape(-1)  # strides cannot express it: a lazy copy
    step = x.explain(json=True)["steps"][0]
    assert step["op"] == "copy" and step["route"] == "cpu.copy"
    assert step["inputs"][0]["load"] == "materialized"
    assert x.route == "cpu.copy"


def test_long_plans_come_back_whole(rng: np.random.Generator) -> None:
    # Many steps: the text is far longer than any first guess, read by the length protocol.
    x = _t(rng, 8, 8)
    w = _t(rng, 8, 8)
    for _ in range(40):
        x = x @ w
    text = x.explain()
    assert sum(1 for line in text.splitlines() if line.startswith("step ")) == 40
    assert len(x.explain(json=True)["steps"]) == 40


def test_route_names_what_computed_the_buffer(rng: np.random.Generator) -> None:
    a, b = _t(rng, 4, 6), _t(rng, 6, 5)
    assert a.route == "host" and a.T.route == "host"
    out = a @ b
    # pending: the route it would take now (4 rows: skinny on a variant that has it)
    assert out.route in _few_row_routes()
    big = tgrad.Tensor.from_numpy(np.ones((17, 6), np.float32)) @ b
    assert big.route == f"cpu.{tgrad.matmul_order_kernel()}.gemm"
    pending = out.route
    out.realize()
    assert out.route == pending
    empty_k = tgrad.Tensor.from_numpy(np.ones((3, 0), np.float32)) @ \
        tgrad.Tensor.from_numpy(np.ones((0, 2), np.float32))
    assert empty_k.route == "cpu.zeros"


def test_a_pending_route_follows_the_cpu_variant() -> None:
    a = tgrad.Tensor.from_numpy(np.ones((16, 16), np.float32))
    out = a @ a
    isa_before = tgrad._cpu_isa_setting()
    try:
        tgrad.set_cpu_isa("portable")
        assert out.route == "cpu.portable_block32.gemm"  # the default order's portable kernel
        out.realize()
    finally:
        tgrad.set_cpu_isa(isa_before)
    assert out.route == "cpu.portable_block32.gemm"  # what ran, not what would run now


def test_views_share_the_buffer_id(rng: np.random.Generator) -> None:
    a = _t(rng, 4, 6)
    views = [a.T, a[1:, ::2], a.reshape(6, 4), a.view(24), a[0], a[:1].expand(3, 6), a.contiguous()]
    assert {v.buffer_id for v in views} == {a.buffer_id}
    b = _t(rng, 4, 6)
    assert b.buffer_id != a.buffer_id
    assert (a @ b.T).buffer_id not in (a.buffer_id, b.buffer_id)


def test_explain_of_a_released_tensor_is_refused(rng: np.random.Generator) -> None:
    a = _t(rng, 2, 2)
    a.release()
    for read in (lambda: a.explain(), lambda: a.route, lambda: a.buffer_id):
        with pytest.raises(errors.InvalidHandleError):
            read()
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.explain(np.ones(3))  # type: ignore[arg-type]


def test_text_that_grows_between_length_and_read_is_asked_again() -> None:
    # The (dst, cap, len) protocol: cap 0 asks the length; a read that finds the text longer
    # (another thread realized the graph meanwhile) asks again.
    from tgrad._ffi import ffi, lib
    from tgrad.tensor import _c_text

    texts = iter([b"short", b"a longer text", b"a longer text"])
    calls: list[int] = []

    def fake(dst, cap, length):
        text = next(texts)
        calls.append(cap)
        length[0] = len(text)
        if cap <= len(text):
            return int(lib.TGRAD_ERR_BUFFER_TOO_SMALL)
        ffi.memmove(dst, text + b"\0", len(text) + 1)
        return 0

    assert _c_text(fake) == "a longer text"
    assert calls == [0, 6, 14]


@pytest.mark.parametrize(("variant", "most_rows"), [("avx512f", 48), ("avx2", 16)])
def test_fma_variants_stream_one_row_and_short_m(variant: str, most_rows: int) -> None:
    """The FMA variants have the one-row path (row- and column-major B, and a one-column product)
    and the few-rows path; past 16 rows AVX2 packs (its passes of 12 rows measured slower)."""
    if not tgrad.cpu_isas().get(variant):
        pytest.skip(f"this CPU cannot run {variant}")

    def ones(*shape: int) -> tgrad.Tensor:
        return tgrad.Tensor.from_numpy(np.ones(shape, np.float32))

    isa_before, order_before = tgrad._cpu_isa_setting(), tgrad.get_matmul_order()
    try:
        tgrad.set_matmul_order("pairwise")  # the pairwise variants' own paths
        tgrad.set_cpu_isa(variant)
        b = ones(40, 70)
        assert (ones(1, 40) @ b).route == f"cpu.{variant}.rowvec"
        assert (ones(1, 40) @ ones(70, 40).T).route == f"cpu.{variant}.rowvec"
        assert (ones(70, 40) @ ones(40, 1)).route == f"cpu.{variant}.rowvec"
        for m, route in ((2, "skinny"), (16, "skinny"), (17, "gemm")):
            assert (ones(m, 40) @ b).route == f"cpu.{variant}.{route}"
        big_b = ones(1024, 1024)
        assert (ones(most_rows, 1024) @ big_b).route == f"cpu.{variant}.skinny"
        assert (ones(most_rows + 1, 1024) @ big_b).route == f"cpu.{variant}.gemm"
    finally:
        tgrad.set_cpu_isa(isa_before)
        tgrad.set_matmul_order(order_before)


@pytest.mark.skipif(not tgrad.cpu_isas().get("avx512bf16"), reason="this CPU has no AVX512-BF16")
def test_short_m_with_row_major_b_routes_to_the_skinny_path() -> None:
    b = tgrad.Tensor.from_numpy(np.ones((40, 70), np.float32))
    isa_before, order_before = tgrad._cpu_isa_setting(), tgrad.get_matmul_order()
    try:
        tgrad.set_matmul_order("pairwise")  # the pairwise variant's own paths
        tgrad.set_cpu_isa("avx512bf16")
        for m, route in ((1, "rowvec"), (2, "skinny"), (16, "skinny"), (17, "gemm")):
            a = tgrad.Tensor.from_numpy(np.ones((m, 40), np.float32))
            assert (a @ b).route == f"cpu.avx512bf16.{route}"
        # 17 to 48 rows take the skinny path (in passes) only when B is not small
        big_b = tgrad.Tensor.from_numpy(np.ones((1024, 1024), np.float32))
        for m, route in ((48, "skinny"), (49, "gemm")):
            a = tgrad.Tensor.from_numpy(np.ones((m, 1024), np.float32))
            assert (a @ big_b).route == f"cpu.avx512bf16.{route}"
        # B read through a transpose is not row-major: the GEMM frame packs it, once B is past the
        # few-row rule's 2^17 elements (below them, plan.c's FEW_ROWS: one-row products)
        bt = tgrad.Tensor.from_numpy(np.ones((70, 40), np.float32)).T
        assert (tgrad.Tensor.from_numpy(np.ones((4, 40), np.float32)) @ bt).route == "cpu.avx512bf16.rowvec"
        big_bt = tgrad.Tensor.from_numpy(np.ones((1024, 256), np.float32)).T
        assert (tgrad.Tensor.from_numpy(np.ones((4, 256), np.float32)) @ big_bt).route == "cpu.avx512bf16.gemm"
    finally:
        tgrad.set_cpu_isa(isa_before)
        tgrad.set_matmul_order(order_before)
