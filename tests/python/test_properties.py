"""Property tests (hypothesis): random shapes, views and values against the oracle, bit for bit,
on every CPU variant this machine runs. Shapes include 0, 1, primes and block edges; values
include subnormals, signed zeros, infinities and NaN."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tgrad
from tgrad.conformance.oracle import matmul_bits

pytestmark = pytest.mark.slow  # a randomized sweep over every CPU variant

BF16 = np.dtype(ml_dtypes.bfloat16)
VARIANTS = [name for name, ok in tgrad.cpu_isas().items() if ok]

bits = st.one_of(
    st.integers(0, 0xFFFF),                                   # any pattern (NaN payloads too)
    st.sampled_from([0x0000, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x807F, 0x3F80, 0xBF80]),
    st.integers(0x3C00, 0x4300) | st.integers(0xBC00, 0xC300),  # moderate magnitudes
)


@st.composite
def problems(draw: Any) -> tuple[np.ndarray, np.ndarray, str, str]:
    m, k, n = (draw(st.integers(0, 37)) for _ in range(3))
    a_view = draw(st.sampled_from(["plain", "transpose", "negstep", "slice2"]))
    b_view = draw(st.sampled_from(["plain", "transpose", "negstep", "expand"]))
    a = np.array(draw(st.lists(bits, min_size=m * k * 2, max_size=m * k * 2)), np.uint16).reshape(2 * m, k) if m * k else np.zeros((2 * m, k), np.uint16)
    b = np.array(draw(st.lists(bits, min_size=k * n, max_size=k * n)), np.uint16).reshape(k, n) if k * n else np.zeros((k, n), np.uint16)
    return a, b, a_view, b_view


def _views(a: np.ndarray, b: np.ndarray, a_view: str, b_view: str) -> tuple[Any, Any, np.ndarray, np.ndarray]:
    ta, tb = tgrad.Tensor.from_numpy(a.view(BF16)), tgrad.Tensor.from_numpy(b.view(BF16))
    na, nb = a, b
    if a_view == "plain":
        ta, na = ta[: a.shape[0] // 2], na[: a.shape[0] // 2]
    elif a_view == "transpose":  # the same [M, K] values read through a transposed buffer
        ta = tgrad.Tensor.from_numpy(np.ascontiguousarray(a[: a.shape[0] // 2].T).view(BF16)).T
        na = a[: a.shape[0] // 2]
    elif a_view == "negstep":
        ta, na = ta[::-2], na[::-2]
    else:
        ta, na = ta[::2], na[::2]
    if b_view == "transpose":
        tb = tgrad.Tensor.from_numpy(np.ascontiguousarray(b.T).view(BF16)).T
    elif b_view == "negstep":
        tb, nb = tb[:, ::-1], nb[:, ::-1]
    elif b_view == "expand" and b.shape[0] > 0:
        tb, nb = tb[:1].expand(b.shape[0], b.shape[1]), np.broadcast_to(nb[:1], nb.shape)
    return ta, tb, na, nb


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problems())
def test_random_problems_match_the_oracle_on_every_variant(problem: tuple[np.ndarray, np.ndarray, str, str]) -> None:
    a, b, a_view, b_view = problem
    ta, tb, na, nb = _views(a, b, a_view, b_view)
    want = matmul_bits(na, nb)
    isa_before = tgrad._cpu_isa_setting()
    try:
        for name in VARIANTS:
            tgrad.set_cpu_isa(name)
            got = (ta @ tb).numpy().view(np.uint16)
            assert got.shape == want.shape
            assert np.array_equal(got, want), f"{name}: {a_view} @ {b_view} differs"
    finally:
        tgrad.set_cpu_isa(isa_before)
