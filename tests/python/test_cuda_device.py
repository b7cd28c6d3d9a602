"""The CUDA backend on a GPU: the conformance roster bit-exact on device="cuda" for the naive and
tiled routes, the default route, elementwise ops and a fused graph against the CPU's bytes. Skipped
where the backend is unavailable (every machine without an NVIDIA GPU and driver, CI included:
the summary line says so), failed instead under TGRAD_REQUIRE_CUDA=1 (a run on a GPU,
docs/cuda.md). The backend without a GPU is tested in test_cuda_backend.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

import tgrad
from tgrad._ffi import lib
from tgrad.conformance.oracle import bf16_bits_to_f32, f32_to_bf16_bits, matmul_bits, tc_bound
from tgrad.conformance.rosters import Case, build_operands, roster
from test_opencl import check_default_routes

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


def test_the_default_route_on_cuda_is_tiled_and_naive_for_a_few_rows(cuda_device: str) -> None:
    check_default_routes("cuda")


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


# ---- the precision policy (tgrad.matmul_precision): exact by default, tc only under "bounded" --------------------
def _sm(device: str) -> int:
    found = re.search(r"\(sm_(\d+)", device)
    assert found, device
    return int(found.group(1))


def test_under_the_exact_default_a_tc_eligible_product_gives_the_cpus_bytes(cuda_device: str) -> None:
    rng = np.random.default_rng(38)
    x, y = rng.standard_normal((96, 128)).astype(np.float32), rng.standard_normal((128, 80)).astype(np.float32)
    with tgrad.Tensor.from_numpy(x) as a, tgrad.Tensor.from_numpy(y) as b, a @ b as c:
        want = c.numpy().view(np.uint16)
    assert tgrad.get_matmul_precision() == "exact"
    with tgrad.Tensor.from_numpy(x, device="cuda") as a, tgrad.Tensor.from_numpy(y, device="cuda") as b, a @ b as c:
        assert c.route == "cuda.tiled"
        assert np.array_equal(c.numpy().view(np.uint16), want)


def test_under_bounded_tc_runs_within_its_bound_and_deterministically(cuda_device: str) -> None:
    rng = np.random.default_rng(39)
    x, y = rng.standard_normal((96, 128)).astype(np.float32), rng.standard_normal((128, 80)).astype(np.float32)
    a_bits, b_bits = f32_to_bf16_bits(x), f32_to_bf16_bits(y)
    runs = []
    with tgrad.matmul_precision("bounded"):
        for _ in range(2):
            with tgrad.Tensor.from_numpy(x, device="cuda") as a, tgrad.Tensor.from_numpy(y, device="cuda") as b, \
                    a @ b as c:
                route = c.route
                runs.append(c.numpy().view(np.uint16))
    if _sm(cuda_device) < 80:  # no mma.sync for bf16: tiled, the oracle's bytes
        assert route == "cuda.tiled" and np.array_equal(runs[0], matmul_bits(a_bits, b_bits))
        return
    assert route == "cuda.tc"
    assert np.array_equal(runs[0], runs[1])  # deterministic run to run
    s, allowed, in_domain = tc_bound(a_bits, b_bits, "cuda")
    assert in_domain.all()
    err = np.abs(bf16_bits_to_f32(runs[0]).astype(np.float64) - s)
    assert (err <= allowed).all(), f"{int((~(err <= allowed)).sum())} outputs outside tc's bound"


def test_forcing_tc_under_exact_is_refused_and_changes_nothing(cuda_device: str) -> None:
    x = np.ones((64, 64), np.float32)
    with tgrad.Tensor.from_numpy(x, device="cuda") as a, a @ a as c:
        lib.tgrad_set_device_route(lib.TGRAD_ROUTE_TC)
        try:
            with pytest.raises(tgrad.errors.RouteNotEligibleError, match="matmul precision is exact"):
                c.realize()
            assert not c.is_realized
        finally:
            lib.tgrad_set_device_route(0)
        assert np.array_equal(c.numpy().astype(np.float32), x @ x)  # the default route: tiled, exact here
