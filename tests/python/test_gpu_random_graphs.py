"""Random graphs of the fuzzer's kind (tests/fuzz/fuzz_graph.c) on PoCL (issue 37): a seeded
sequence of ops over a pool of tensors — every elementwise op of the registry (pow and the
derivative ops among them), products, the views (transpose, permute, expand, slice with any step,
select, view, reshape, contiguous) and casts to float32 and back — built once on the CPU and once
on device="opencl" with fusion on. Both must refuse the same ops with the same error class, and
every tensor of the pool must read back as the same bytes. Slow tier: each new kernel text is
compiled by PoCL once.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import tgrad
from tgrad import errors
from test_gpu_reduce import _opencl_ready

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not _opencl_ready(), reason="no usable OpenCL device")]

POOL, STEPS = 6, 20
UNARY = [n for n, i in tgrad.ops.REGISTRY.items() if i.arity == 1]
BINARY = [n for n, i in tgrad.ops.REGISTRY.items() if i.arity == 2]
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1.0, 1.0, 3.0, 0.5], np.float32)


def _bases(rng: np.random.Generator) -> list[np.ndarray]:
    """Float arrays of small extents (1 to 4 on 1 to 3 axes), one value in eight special."""
    out = []
    for _ in range(3):
        shape = tuple(int(s) for s in rng.integers(1, 5, rng.integers(1, 4)))
        a = (rng.standard_normal(shape) * rng.choice([0.5, 2.0, 30.0])).astype(np.float32)
        mask = rng.random(shape) < 0.125
        a[mask] = rng.choice(SPECIAL, int(mask.sum()))
        out.append(a)
    return out


def _step(rng: np.random.Generator, a: tgrad.Tensor, b: tgrad.Tensor) -> Callable[[], tgrad.Tensor]:
    """One drawn op on a (and b), as a thunk: the same draw builds it on either device."""
    kind = int(rng.integers(0, 12))
    nd = a.ndim
    if kind == 0:
        name = UNARY[int(rng.integers(0, len(UNARY)))]
        return lambda: tgrad.ops.apply(name, a)
    if kind in (1, 2):
        name = BINARY[int(rng.integers(0, len(BINARY)))]
        return lambda: tgrad.ops.apply(name, a, b)
    if kind == 3:
        return lambda: a @ b
    if kind == 4:
        i, j = (int(v) for v in rng.integers(0, max(nd, 1), 2))
        return lambda: a.transpose(i, j)
    if kind == 5:
        axes = [int(v) for v in rng.permutation(nd)]
        return lambda: a.permute(*axes)
    if kind == 6:
        shape = (int(rng.integers(1, 4)),) + tuple(int(rng.integers(1, 4)) if s == 1 else s for s in a.shape)
        return lambda: a.expand(*shape)
    if kind == 7 and nd:
        axis = int(rng.integers(0, nd))
        start, stop, by = int(rng.integers(-4, 4)), int(rng.integers(-4, 5)), int(rng.choice([1, 2, -1, -2]))
        index = [slice(None)] * nd
        index[axis] = slice(start, stop, by)
        return lambda: a[tuple(index)]
    if kind == 8 and nd:
        axis, at = int(rng.integers(0, nd)), int(rng.integers(-4, 4))
        index = [slice(None)] * nd
        index[axis] = at
        return lambda: a[tuple(index)]
    if kind == 9:
        return lambda: a.reshape(-1)
    if kind == 10:
        to = str(rng.choice(["float32", "bfloat16", "int32"]))
        return lambda: a.to(getattr(tgrad, to))
    return lambda: a.contiguous()


def _bits(t: tgrad.Tensor) -> tuple[str, tuple[int, ...], bytes]:
    values = np.ascontiguousarray(t.numpy())
    return t.dtype.name, tuple(t.shape), values.view(np.uint8).tobytes()


def _run(seed: int, device: str) -> tuple[list[str], list[Any]]:
    """The seed's graph on one device: each step's outcome (made, or the error's class) and the
    pool's bytes at the end."""
    rng = np.random.default_rng(seed)
    pool = [tgrad.Tensor.from_numpy(a, dtype=tgrad.bfloat16, device=device) for a in _bases(rng)]
    while len(pool) < POOL:
        pool.append(pool[len(pool) % 3].contiguous())
    outcomes = []
    for _ in range(STEPS):
        ia, ib, slot = (int(v) for v in rng.integers(0, POOL, 3))
        thunk = _step(rng, pool[ia], pool[ib])
        try:
            pool[slot] = thunk()
            outcomes.append("made")
        except errors.TgradError as e:  # a typed refusal, the same on both devices
            outcomes.append(type(e).__name__)
    read = []
    for t in pool:
        try:
            read.append(_bits(t))
        except errors.TgradError as e:  # a failure at realization (an int32 cast of a NaN, ...)
            read.append(type(e).__name__)
    return outcomes, read


@pytest.mark.parametrize("seed", range(24))
def test_a_random_graph_gives_the_cpu_bytes_on_pocl(seed: int) -> None:
    tgrad.set_fusion(True)
    cpu, dev = _run(seed, "cpu"), _run(seed, "opencl")
    assert cpu[0] == dev[0]  # the same ops refused, with the same error class
    for i, (want, got) in enumerate(zip(cpu[1], dev[1])):
        assert want == got, f"seed {seed}: pool tensor {i} differs"
