"""The CUDA backend on a GPU: the conformance roster bit-exact on device="cuda" for the naive and
tiled routes, the default route, elementwise ops and a fused graph against the CPU's bytes. Skipped
where the backend is unavailable (every machine without an NVIDIA GPU and driver, CI included:
the summary line says so), failed instead under TGRAD_REQUIRE_CUDA=1 (a run on a GPU,
docs/cuda.md). The backend without a GPU is tested in test_cuda_backend.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

import tgrad
from tgrad._ffi import lib
from tgrad.conformance.oracle import matmul_bits
from tgrad.conformance.rosters import Case, build_operands, roster

CI_ROSTER = roster("ci")
ROUTES = {"naive": lib.TGRAD_ROUTE_NAIVE, "tiled": lib.TGRAD_ROUTE_TILED}


@contextmanager
def device_route(name: str) -> Iterator[None]:
    assert lib.tgrad_set_device_route(ROUTES[name]) == 0
    try:
        yield
    finally:
        lib.tgrad_set_device_route(0)


@pytest.mark.parametrize("route", ["naive", "tiled"])
@pytest.mark.parametrize("case", CI_ROSTER, ids=[c.id for c in CI_ROSTER])
def test_roster_case_is_bit_exact_on_cuda(case: Case, route: str, cuda_device: str) -> None:
    a_base, b_base, apply_view = build_operands(case)
    want = matmul_bits(np.asarray(apply_view(a_base, "a")).view(np.uint16),
                       np.asarray(apply_view(b_base, "b")).view(np.uint16))
    with tgrad.Tensor.from_numpy(a_base, device="cuda") as a0, \
            tgrad.Tensor.from_numpy(b_base, device="cuda") as b0, device_route(route):
        a, b = apply_view(a0, "a"), apply_view(b0, "b")  # views of device buffers, read in place
        try:
            with a @ b as c:
                assert c.device == "cuda" and c.route == f"cuda.{route}"
                got = c.numpy().view(np.uint16)
        finally:
            a.release()
            b.release()
    assert got.shape == want.shape
    bad = np.argwhere(got != want)
    assert bad.size == 0, (f"{len(bad)} of {want.size} outputs differ; first C{list(bad[0])}: "
                           f"got 0x{int(got[tuple(bad[0])]):04x}, want 0x{int(want[tuple(bad[0])]):04x}")


def test_the_default_route_on_cuda_is_tiled(cuda_device: str) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    with tgrad.Tensor.from_numpy(x, device="cuda") as a, a @ a.T as c:
        assert c.route == "cuda.tiled"
        assert np.array_equal(c.numpy().astype(np.float32), x @ x.T)  # small integers: exact


def test_a_fused_graph_on_cuda_gives_the_cpus_bytes(cuda_device: str) -> None:
    # rendered kernels with elementwise ops (integer ops and a table op) fused into the matmul
    # or run as their own step, and a broadcast operand
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((50, 70)).astype(np.float32), rng.standard_normal((40, 70)).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)

    def graph(device: str) -> np.ndarray:
        with tgrad.Tensor.from_numpy(x, device=device) as xt, tgrad.Tensor.from_numpy(w, device=device) as wt, \
                tgrad.Tensor.from_numpy(b, device=device) as bt:
            with tgrad.silu(tgrad.gelu(xt @ wt.T + bt) * bt - 0.25) as out:
                assert out.device == device
                return out.numpy().view(np.uint16)

    assert np.array_equal(graph("cuda"), graph("cpu"))


def test_a_large_product_gives_the_cpus_bytes(cuda_device: str) -> None:
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((1024, 768)).astype(np.float32), rng.standard_normal((768, 1000)).astype(np.float32)
    with tgrad.Tensor.from_numpy(x) as a, tgrad.Tensor.from_numpy(y) as b, a @ b as c:
        want = c.numpy().view(np.uint16)
    with tgrad.Tensor.from_numpy(x, device="cuda") as a, tgrad.Tensor.from_numpy(y, device="cuda") as b, a @ b as c:
        assert np.array_equal(c.numpy().view(np.uint16), want)
