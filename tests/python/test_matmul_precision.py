"""The matmul precision policy (tgrad.precision; docs/numerics.md, "Precision policy"): "exact" by
default, "bounded" allows the GPU tc routes. Here: the Python API and the C ABI's setter (values,
typed refusals that change nothing, the context manager restoring), and the CPU, which has no
bounded route, giving the same bytes and plan under both. The route choice on a device with matrix
hardware: tests/c/test_device_stub.c (a Metal stand-in) and test_cuda_backend.py (a fake CUDA
driver); tc's bound on the kernel the policy picks: test_cuda_emu.py; on a GPU: test_cuda_device.py."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad._ffi import ffi, lib


@pytest.fixture(autouse=True)
def _exact_after() -> Iterator[None]:
    yield
    tgrad.set_matmul_precision("exact")


def test_the_default_is_exact() -> None:
    assert tgrad.get_matmul_precision() == "exact"
    assert lib.tgrad_matmul_precision() == lib.TGRAD_MATMUL_PRECISION_EXACT == 0
    assert lib.TGRAD_MATMUL_PRECISION_BOUNDED == 1


def test_set_and_get_round_trip() -> None:
    tgrad.set_matmul_precision("bounded")
    assert tgrad.get_matmul_precision() == "bounded"
    assert lib.tgrad_matmul_precision() == lib.TGRAD_MATMUL_PRECISION_BOUNDED
    tgrad.set_matmul_precision("exact")
    assert tgrad.get_matmul_precision() == "exact"


@pytest.mark.parametrize("bad", ["Bounded", "high", "medium", "tc", "", None, 1, b"exact"])
def test_a_bad_name_is_a_typed_error_and_changes_nothing(bad: object) -> None:
    tgrad.set_matmul_precision("bounded")
    with pytest.raises(errors.InvalidArgumentError, match=r"set_matmul_precision: precision must be one of "
                                                          r"\('exact', 'bounded'\), got "):
        tgrad.set_matmul_precision(bad)  # type: ignore[arg-type]
    assert tgrad.get_matmul_precision() == "bounded"
    with pytest.raises(errors.InvalidArgumentError, match="matmul_precision: precision must be one of"):
        with tgrad.matmul_precision(bad):  # type: ignore[arg-type]
            pytest.fail("the block ran under a bad name")
    assert tgrad.get_matmul_precision() == "bounded"


@pytest.mark.parametrize("code", [2, -1, 1 << 30])
def test_the_c_setter_refuses_other_values_and_changes_nothing(code: int) -> None:
    assert lib.tgrad_set_matmul_precision(lib.TGRAD_MATMUL_PRECISION_BOUNDED) == 0
    assert lib.tgrad_set_matmul_precision(code) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert ffi.string(lib.tgrad_last_error()).decode() == (
        f"set_matmul_precision: {code} is not a precision (0 exact, 1 bounded)")
    assert lib.tgrad_matmul_precision() == lib.TGRAD_MATMUL_PRECISION_BOUNDED


def test_the_context_manager_sets_and_restores() -> None:
    with tgrad.matmul_precision("bounded"):
        assert tgrad.get_matmul_precision() == "bounded"
        with tgrad.matmul_precision("exact"):
            assert tgrad.get_matmul_precision() == "exact"
        assert tgrad.get_matmul_precision() == "bounded"
    assert tgrad.get_matmul_precision() == "exact"


def test_the_context_manager_restores_after_an_exception() -> None:
    tgrad.set_matmul_precision("bounded")
    with pytest.raises(ZeroDivisionError):
        with tgrad.matmul_precision("exact"):
            assert tgrad.get_matmul_precision() == "exact"
            1 / 0  # noqa: B018
    assert tgrad.get_matmul_precision() == "bounded"


def test_the_cpu_has_no_bounded_route_same_bytes_and_plan_under_both() -> None:
    rng = np.random.default_rng(38)
    x = rng.standard_normal((33, 70)).astype(np.float32)
    w = rng.standard_normal((70, 41)).astype(np.float32)
    runs = {}
    for policy in ("exact", "bounded"):
        with tgrad.matmul_precision(policy), tgrad.Tensor.from_numpy(x) as a, tgrad.Tensor.from_numpy(w) as b, \
                a @ b as c:
            plan = tgrad.explain(c, json=True)["steps"][0]
            runs[policy] = (c.route, plan.get("plan"), c.numpy().view(np.uint16))
    # the CPU step's plan names the order only: no precision, no bound
    assert runs["exact"][:2] == runs["bounded"][:2] and runs["exact"][1] == f"order {tgrad.get_matmul_order()}"
    assert runs["exact"][0].startswith("cpu.")
    assert np.array_equal(runs["exact"][2], runs["bounded"][2])
