"""Batched matmul with torch.matmul's rules: [..., M, K] @ [..., K, N], batch axes broadcast,
operands read through their views, 1-D operands promoted and the added axis removed.

The promise checked here: each batch's bytes are the bytes of the 2-D product of that batch's
matrices (the same documented order and route), on every thread count and fusion setting (the
suite reruns this file per forced CPU variant), for bf16 and float32 results, with an
elementwise epilogue fused into the batched product or not.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad import Tensor, errors


@pytest.fixture(autouse=True)
def _restore_runtime_settings():
    threads, fusion = tgrad.num_threads(), tgrad.fusion_enabled()
    yield
    tgrad.set_num_threads(threads)
    tgrad.set_fusion(fusion)


def _rand(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    # bf16 values with random exponents and signs: the additions round, so the order shows
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-6, 7, shape))
    return x.astype(ml_dtypes.bfloat16)


def _bits(t: Tensor) -> np.ndarray:
    arr = t.numpy()
    return arr.view(np.uint32 if arr.dtype == np.float32 else np.uint16)


def _per_batch(a: Tensor, b: Tensor, out_dtype=None, other: Tensor | None = None, bias: Tensor | None = None) -> np.ndarray:
    """The result batch by batch: each the 2-D product of that batch's matrices (views of a and
    b, broadcast batch axes read as index 0), stacked; with other and bias, ((c + other) .gelu()
    + bias) for each batch's 2-D product c and other's matrix of that batch."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    out = []
    for idx in itertools.product(*(range(n) for n in batch)):
        ia = tuple(i if n > 1 else 0 for i, n in zip(idx[len(idx) - (a.ndim - 2):], a.shape[:-2]))
        ib = tuple(i if n > 1 else 0 for i, n in zip(idx[len(idx) - (b.ndim - 2):], b.shape[:-2]))
        a2 = a[ia] if ia else a
        b2 = b[ib] if ib else b
        c = tgrad.matmul(a2, b2, out_dtype=out_dtype)
        if other is not None:
            c = (c + other[idx]).gelu() + bias
        out.append(_bits(c))
    return np.stack(out).reshape(*batch, *out[0].shape) if out else np.zeros((*batch, 0, 0))


def _views(rng: np.random.Generator, case: str, batch: tuple[int, ...], m: int, k: int, n: int):
    """Operands of one case: plain, broadcast (one side without batch axes or with extent-1
    ones), transposed last two axes, expanded (stride 0) and sliced batch views."""
    if case == "plain":
        return Tensor.from_numpy(_rand(rng, (*batch, m, k))), Tensor.from_numpy(_rand(rng, (*batch, k, n)))
    if case == "broadcast_right":  # a shared weight
        return Tensor.from_numpy(_rand(rng, (*batch, m, k))), Tensor.from_numpy(_rand(rng, (k, n)))
    if case == "broadcast_left":
        return Tensor.from_numpy(_rand(rng, (m, k))), Tensor.from_numpy(_rand(rng, (*batch, k, n)))
    if case == "broadcast_ones":  # extent-1 batch axes on both sides
        a = Tensor.from_numpy(_rand(rng, (batch[0], 1, m, k)))
        b = Tensor.from_numpy(_rand(rng, (1, 3, k, n)))
        return a, b
    if case == "transposed":  # .mT of both: column-major matrices
        a = Tensor.from_numpy(_rand(rng, (*batch, k, m))).mT
        b = Tensor.from_numpy(_rand(rng, (*batch, n, k))).mT
        return a, b
    if case == "expanded":  # one matrix expanded over the batch (stride 0), the other permuted
        a = Tensor.from_numpy(_rand(rng, (1, m, k))).expand(*batch, m, k)
        b = Tensor.from_numpy(_rand(rng, (k, *batch, n))).permute(1, 0, 2)
        return a, b
    if case == "sliced":  # every other batch, a stepped column slice
        a = Tensor.from_numpy(_rand(rng, (2 * batch[0], m, k)))[::2]
        b = Tensor.from_numpy(_rand(rng, (batch[0], k, 2 * n)))[:, :, ::2]
        return a, b
    raise AssertionError(case)


CASES = ["plain", "broadcast_right", "broadcast_left", "broadcast_ones", "transposed", "expanded", "sliced"]
# (batch, M, K, N): products below the one-thread threshold, run one after another when the
# whole batch is below it too and else spread over the pool as whole products (gemm, one-row
# and few-row routes each way), and products above it (each threaded over its tiles); odd sizes
# around the tiles
SHAPES = [((4,), 5, 7, 9), ((6,), 33, 40, 17), ((3,), 1, 64, 50), ((5,), 12, 96, 70), ((8,), 64, 72, 64),
          ((12,), 20, 100, 90), ((40,), 1, 256, 210), ((27,), 12, 96, 70), ((2,), 130, 150, 120)]
SMALL_MNK = 1 << 21  # cpu/frame.h: below it one product runs on one thread
BATCH_SHARE_MNK = 1 << 16  # cpu/plan.c: a batch of such products with this many multiply-adds in all is shared


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, (*s[0], *s[1:]))))
def test_each_batch_is_its_2d_product(case: str, shape) -> None:
    batch, m, k, n = shape
    rng = np.random.default_rng(hash((case, shape)) % 2**32)
    a, b = _views(rng, case, batch, m, k, n)
    want = _per_batch(a, b)
    for threads in (1, 2, 3):
        tgrad.set_num_threads(threads)
        c = a @ b
        nbatch = int(np.prod(c.shape[:-2]))
        if case == "broadcast_right":  # b shared, a's batches contiguous rows: one product of their rows
            assert f"batch {nbatch} (one product of all the batches' rows: b is shared)" in c.explain()
        elif case in ("broadcast_left", "expanded") and (c.route.endswith(".rowvec") or nbatch >= 4 * threads):
            # a shared by every batch: packed once (cpu/shared_a.c; more than one row from 4 batches a thread)
            assert f"batch {nbatch} (a is shared: packed once" in c.explain()
        elif threads > 1 and m * k * n < SMALL_MNK and BATCH_SHARE_MNK <= m * k * n * nbatch:  # spread over the pool
            assert f"batch {nbatch} (whole products spread over the threads)" in c.explain()
        elif m * k * n * nbatch < BATCH_SHARE_MNK:  # too little work to hand out: one after another
            assert f"batch {nbatch} (one product after another" in c.explain()
        got = _bits(c)
        assert got.shape == want.shape
        assert np.array_equal(got, want), f"{threads} threads: {np.count_nonzero(got != want)} differ"


# A shared by the batches, packed once (cpu/shared_a.c, route gemm): M rows past whole 12-row
# panels run their last panel on a shorter kernel (64 = 5 x 12 + 4, 20 = 12 + 8, 5 on the 8-row
# one), K past one 512-deep panel, and the next batch's B prefetched across the tiles
@pytest.mark.parametrize("shape", [((8,), 64, 600, 32), ((12,), 20, 100, 90), ((9,), 5, 1100, 64)],
                         ids=["tail4", "tail8", "short"])
@pytest.mark.parametrize("out_dtype", [None, tgrad.float32], ids=["bf16", "f32"])
def test_a_shared_left_operand_with_a_short_last_panel_gives_each_batch(shape, out_dtype) -> None:
    batch, m, k, n = shape
    rng = np.random.default_rng(11)
    a, b = _views(rng, "broadcast_left", batch, m, k, n)
    want = _per_batch(a, b, out_dtype=out_dtype)
    for threads in (1, 2):
        tgrad.set_num_threads(threads)
        c = tgrad.matmul(a, b, out_dtype=out_dtype)
        assert f"batch {batch[0]} (a is shared: packed once" in c.explain()
        assert np.array_equal(_bits(c), want), f"{threads} threads"


@pytest.mark.parametrize("shape", [((4,), 9, 33, 20), ((2,), 130, 150, 120)], ids=["small", "threaded"])
def test_float32_results_are_each_batch_accumulators(shape) -> None:
    batch, m, k, n = shape
    rng = np.random.default_rng(7)
    a, b = _views(rng, "transposed", batch, m, k, n)
    want = _per_batch(a, b, out_dtype=tgrad.float32)
    for threads in (1, 2):
        tgrad.set_num_threads(threads)
        c = tgrad.matmul(a, b, out_dtype=tgrad.float32)
        assert c.dtype == tgrad.float32 and c.shape == (*batch, m, n)
        assert np.array_equal(_bits(c), want)


@pytest.mark.parametrize("shape", [((3, 2), 10, 24, 40), ((8,), 64, 72, 64), ((2,), 130, 150, 120)],
                         ids=["small", "spread", "threaded"])
def test_epilogue_fused_or_not_keeps_the_bytes(shape) -> None:
    batch, m, k, n = shape
    rng = np.random.default_rng(11)
    a = Tensor.from_numpy(_rand(rng, (*batch, m, k)))
    b = Tensor.from_numpy(_rand(rng, (k, n))).expand(*batch, k, n)
    other = Tensor.from_numpy(_rand(rng, (*batch, m, n)))  # a value per element: each batch its own
    bias = Tensor.from_numpy(_rand(rng, (n,)))  # one row for all batches
    tgrad.set_fusion(False)
    want = _per_batch(a, b, other=other, bias=bias)
    for fused, threads in itertools.product((True, False), (1, 2)):
        tgrad.set_fusion(fused)
        tgrad.set_num_threads(threads)
        c = ((a @ b) + other).gelu() + bias
        if fused:
            assert "matmul+add+gelu+add" in c.explain()
        assert np.array_equal(_bits(c), want), f"fused={fused}, {threads} threads"


@pytest.mark.parametrize("sa,sb,want", [
    ((7,), (7, 5), (5,)), ((4, 7), (7,), (4,)), ((7,), (7,), ()),
    ((3, 4, 7), (7,), (3, 4)), ((7,), (3, 7, 5), (3, 5)), ((2, 1, 4, 7), (3, 7, 5), (2, 3, 4, 5)),
])
def test_1d_operands_are_promoted_and_the_axis_removed(sa, sb, want) -> None:
    rng = np.random.default_rng(3)
    an, bn = _rand(rng, sa), _rand(rng, sb)
    a, b = Tensor.from_numpy(an), Tensor.from_numpy(bn)
    c = a @ b
    assert c.shape == want
    # the same bytes as the product of the promoted operands, the axis removed by a reshape
    a2 = Tensor.from_numpy(an.reshape(1, -1)) if len(sa) == 1 else a
    b2 = Tensor.from_numpy(bn.reshape(-1, 1)) if len(sb) == 1 else b
    full = a2 @ b2
    assert np.array_equal(_bits(c), _bits(full).reshape(want))
    # and close to the exact product (the values, not only the bytes)
    exact = np.matmul(an.astype(np.float64), bn.astype(np.float64))
    np.testing.assert_allclose(c.numpy().astype(np.float64), exact, rtol=0.02, atol=1e-2 * np.abs(exact).max())


@pytest.mark.parametrize("sa,sb,error,match", [
    ((), (3, 3), errors.RankMismatchError, "at least 1 dimension"),
    ((3, 4), (), errors.RankMismatchError, "at least 1 dimension"),
    ((2, 3, 4), (3, 4, 5), errors.ShapeMismatchError, "batch dimensions do not broadcast"),
    ((2, 3, 4), (2, 5, 6), errors.ShapeMismatchError, "inner dimensions 4 and 5 differ"),
    ((4,), (5,), errors.ShapeMismatchError, "inner dimensions 4 and 5 differ"),
])
def test_bad_shapes_are_refused_before_anything_is_made(sa, sb, error, match) -> None:
    a = Tensor.from_numpy(np.zeros(sa, np.float32))
    b = Tensor.from_numpy(np.zeros(sb, np.float32))
    start = tgrad.live_tensors()
    with pytest.raises(error, match=match):
        a @ b
    with pytest.raises(error, match=match):
        tgrad.matmul(a, b, out_dtype=tgrad.float32)
    assert tgrad.live_tensors() == start


def test_empty_batches_and_k0() -> None:
    a = Tensor.from_numpy(np.zeros((0, 3, 4), np.float32))
    b = Tensor.from_numpy(np.ones((4, 5), np.float32))
    assert (a @ b).shape == (0, 3, 5) and (a @ b).numpy().size == 0
    k0 = Tensor.from_numpy(np.ones((3, 2, 0), np.float32)) @ Tensor.from_numpy(np.ones((3, 0, 4), np.float32))
    assert k0.shape == (3, 2, 4)
    assert np.array_equal(_bits(k0), np.zeros((3, 2, 4), np.uint16))  # +0 everywhere


def test_explain_names_the_route_and_the_batch() -> None:
    rng = np.random.default_rng(5)
    a, b = Tensor.from_numpy(_rand(rng, (16, 8, 8))), Tensor.from_numpy(_rand(rng, (8, 8)))
    text = (a @ b).explain()
    assert "matmul" in text and "batch 16" in text, text


def test_linear_on_batched_input() -> None:
    rng = np.random.default_rng(9)
    w, bias = _rand(rng, (6, 10)), _rand(rng, (6,))
    layer = tgrad.nn.Linear.from_tensors(Tensor.from_numpy(w), Tensor.from_numpy(bias))
    x = Tensor.from_numpy(_rand(rng, (2, 3, 10)))
    y = layer(x)
    assert y.shape == (2, 3, 6)
    for i in range(2):  # each batch as the 2-D layer computes it
        assert np.array_equal(_bits(y)[i], _bits(layer(x[i])))


def test_trace_replays_batched_and_1d_products() -> None:
    rng = np.random.default_rng(13)
    a = Tensor.from_numpy(_rand(rng, (3, 5, 8)))
    w = Tensor.from_numpy(_rand(rng, (4, 8)))
    v = Tensor.from_numpy(_rand(rng, (5,)))
    tr = tgrad.trace(lambda x, y, z: z @ (x @ y.T), a, w, v)
    assert [op.kind for op in tr if op.kind == "matmul"] == ["matmul", "matmul"]
    result = tr.validate()
    assert result.state == "passed", result


def test_gpu_runs_batched_and_1d_with_the_cpu_bytes(opencl_device: str) -> None:
    rng = np.random.default_rng(17)
    an, mn, vn = _rand(rng, (2, 4, 6)), _rand(rng, (6, 3)), _rand(rng, (6,))
    with Tensor.from_numpy(an, device="opencl") as a, Tensor.from_numpy(mn, device="opencl") as m, \
            Tensor.from_numpy(vn, device="opencl") as v:
        # batched (tests/python/test_gpu_batched.py has the roster) and 2-D products with a 1-D
        # operand promoted run there, with the CPU's bytes
        with a @ m as b, v @ m as c, m.T @ v as d:
            assert b.shape == (2, 4, 3) and c.shape == (3,) and d.shape == (3,)
            assert np.array_equal(_bits(b), _bits(Tensor.from_numpy(an) @ Tensor.from_numpy(mn)))
            assert np.array_equal(_bits(c), _bits(Tensor.from_numpy(vn) @ Tensor.from_numpy(mn)))
            assert np.array_equal(_bits(d), _bits(Tensor.from_numpy(mn).T @ Tensor.from_numpy(vn)))


def test_bench_case_checks_and_times_a_small_batch() -> None:
    from tgrad.bench import batched

    res = batched.run_case(batched.Case(3, 20, 30, 10), budget_s=0.01, seed=1, peers=False)
    assert res["correct"] is True
    assert set(res["gflops"]) == {"tgrad batched", "tgrad 2-D"} and all(g > 0 for g in res["gflops"].values())
    assert "each batch its 2-D product" in batched.format_case(res)


def test_render_renders_a_batched_step_over_grid_z_and_a_1d_one() -> None:
    from tgrad import render

    rng = np.random.default_rng(19)
    a, m, v = (Tensor.from_numpy(_rand(rng, s)) for s in [(2, 4, 6), (6, 3), (6,)])
    k = render.render_tensor(a @ m, "tiled")
    assert k.grid[2] == 2 and "a += bz0 * 24;" in k.source  # b is shared: not moved
    assert render.render_tensor(v @ m, "tiled").grid[2] == 1  # [6] @ [6, 3] is a 2-D product
