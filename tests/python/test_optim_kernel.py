"""The optimizer kind (kind 16, libtgrad/src/ops/optim_step.c: one lazy node per output, and
tgrad_optim_step_many: every output in one call) against the composition of library ops it
replaces (tgrad.optim.functional with USE_KERNEL False, the reference): the same bytes for
parameters and every state tensor over several steps, on random and special values (NaN, +-inf,
+-0, subnormals, huge and tiny), every option; the same bytes on every thread count and variant;
bad calls refused before anything is made."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad.optim import _kernel
from tgrad.optim import functional as OF

from every_setting import assert_same_bytes_everywhere


def values(rng: np.random.Generator, n: int) -> np.ndarray:
    a = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -3e-39, 1e-38, 1e-30, 1.0],
                       np.float32)
    a[rng.choice(n, 3 * len(special), replace=False)] = np.tile(special, 3)
    return a


def run_steps(kind: str, P: np.ndarray, Gs: list[np.ndarray], dtype: Any, kw: dict[str, Any]) -> list[bytes]:
    p = tgrad.tensor(P, dtype=tgrad.float32).to(dtype)
    st: list[dict[str, Any]] = [{}]
    for G in Gs:
        g = tgrad.tensor(G, dtype=tgrad.float32)
        (OF.sgd_step if kind == "sgd" else OF.adamw_step)([p], [g], st, **kw)
    out = [p.numpy().tobytes()]
    for key in sorted(st[0]):
        v = st[0][key]
        out.append(v.numpy().tobytes() if isinstance(v, tgrad.Tensor) else repr(v).encode())
    return out


SGD_CONFIGS = [dict(lr=lr, momentum=m, dampening=d, weight_decay=wd, nesterov=n, maximize=mx)
               for lr, (m, d, n), wd, mx in itertools.product(
                   (0.1, 1e-30, 3e-4), ((0.0, 0.0, False), (0.9, 0.0, False), (0.9, 0.0, True), (0.5, 0.3, False)),
                   (0.0, 1e-2), (False, True))]
ADAMW_CONFIGS = [dict(lr=lr, beta1=b1, beta2=b2, eps=eps, weight_decay=wd, amsgrad=am, maximize=mx)
                 for lr, (b1, b2), eps, wd, am, mx in itertools.product(
                     (1e-3, 1e-30, 10.0), ((0.9, 0.999), (0.6, 0.5), (0.0, 0.0)), (1e-8, 0.0), (0.0, 1e-2),
                     (False, True), (False, True))]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_kernel_is_the_composition_byte_for_byte(dtype: str) -> None:
    rng = np.random.default_rng(16)
    dt = getattr(tgrad, dtype)
    P = values(rng, 257)
    Gs = [values(rng, 257) for _ in range(3)]
    bad = []
    for kind, configs in (("sgd", SGD_CONFIGS), ("adamw", ADAMW_CONFIGS)):
        for kw in configs:
            got = run_steps(kind, P, Gs, dt, kw)  # one tgrad_optim_step_many call per step
            OF.ONE_CALL = False  # one lazy node per output
            try:
                per_node = run_steps(kind, P, Gs, dt, kw)
                OF.USE_KERNEL = False
                want = run_steps(kind, P, Gs, dt, kw)
            finally:
                OF.USE_KERNEL = OF.ONE_CALL = True
            if got != want or per_node != want:
                bad.append((kind, kw))
    assert not bad, bad[:5]


def test_kernel_same_bytes_everywhere() -> None:
    rng = np.random.default_rng(7)
    P = rng.standard_normal(40000).astype(np.float32)  # above one task: the pool splits it
    G = rng.standard_normal(40000).astype(np.float32)

    def run() -> list[bytes]:
        return (run_steps("adamw", P, [G, G], tgrad.float32, dict(lr=1e-2, amsgrad=True))
                + run_steps("sgd", P, [G, G], tgrad.float32, dict(lr=0.1, momentum=0.9, nesterov=True)))

    assert_same_bytes_everywhere(run, threads=(1, 2))


def test_kernel_refuses_bad_calls_before_making_anything() -> None:
    x = tgrad.tensor(np.ones(4, np.float32), dtype=tgrad.float32)
    y = tgrad.tensor(np.ones(5, np.float32), dtype=tgrad.float32)
    h = tgrad.tensor(np.ones(4, np.float32), dtype=tgrad.bfloat16)
    live = tgrad.live_tensors() if hasattr(tgrad, "live_tensors") else None
    with pytest.raises(errors.InvalidArgumentError):
        _kernel.step(99, 0, 0, [x, x], [0.0])
    with pytest.raises(errors.InvalidArgumentError):
        _kernel.step(_kernel.SGD, 0, 0, [x], [0.0])
    with pytest.raises(errors.InvalidArgumentError):
        _kernel.step(_kernel.SGD, 1, 0, [x, x], [0.0])  # no momentum: no buffer output
    with pytest.raises(errors.InvalidArgumentError):
        _kernel.step(_kernel.ADAMW, 0, 1 << 10, [x, x, x, x], [0.0])
    with pytest.raises(errors.ShapeMismatchError):
        _kernel.step(_kernel.SGD, 0, 0, [x, y], [0.0])
    with pytest.raises(errors.DtypeUnsupportedError):
        _kernel.step(_kernel.SGD, 0, 0, [x, h], [0.0])
    if live is not None:
        assert tgrad.live_tensors() == live
