"""tgrad_optim_step_many (every output of one optimizer step over many tensors in one C call,
libtgrad/src/ops/optim_many.c) against the path it replaces: one lazy node of the optimizer kind
per output and a cast per bfloat16 parameter (tgrad.optim.functional.ONE_CALL = False). The same
bytes for parameters, master weights and every state over several steps, on random and special
values, float32 and bfloat16 parameters and gradients, strided gradients, every option; a short
training run's loss curve and parameters pinned to the bytes main gave before the change; bad
calls refused before anything is made.

Run as a script, this file prints the pinned training run's digest (how PINNED was made, on main
286d5b7 before tgrad_optim_step_many existed, with that tree's library and binding):
    TGRAD_LIB=<build>/libtgrad/libtgrad.so PYTHONPATH=<tree>/bindings/python python tests/python/test_optim_many.py
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad.optim import _kernel
from tgrad.optim import functional as OF


def values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    a = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -3e-39, 1e-38, 1.0], np.float32)
    k = min(n, len(special))
    a[rng.choice(n, k, replace=False)] = special[:k]
    return a.reshape(shape)


SHAPES = [(5, 7), (7,), (3, 4, 6), (1,)]


def run_steps(kind: str, dtype: Any, grad_dtype: Any, kw: dict[str, Any], one_call: bool) -> list[bytes]:
    """Three steps over four tensors of different shapes (the (5, 7) one's gradient a transposed
    view), every state's bytes after."""
    rng = np.random.default_rng(36)
    params = [tgrad.tensor(values(rng, s), dtype=tgrad.float32).to(dtype) for s in SHAPES]
    state: list[dict[str, Any]] = [{} for _ in SHAPES]
    before = OF.ONE_CALL
    OF.ONE_CALL = one_call
    try:
        for _ in range(3):
            grads = []
            for s in SHAPES:
                if len(s) == 2:
                    g = tgrad.tensor(values(rng, s[::-1]), dtype=tgrad.float32).to(grad_dtype).T
                else:
                    g = tgrad.tensor(values(rng, s), dtype=tgrad.float32).to(grad_dtype)
                grads.append(g)
            (OF.sgd_step if kind == "sgd" else OF.adamw_step)(params, grads, state, **kw)
    finally:
        OF.ONE_CALL = before
    out = [p.numpy().tobytes() for p in params] + [repr(p.requires_grad).encode() for p in params]
    for st in state:
        for key in sorted(st):
            v = st[key]
            out.append(v.numpy().tobytes() if isinstance(v, tgrad.Tensor) else repr(v).encode())
    return out


CONFIGS = ([("sgd", dict(lr=lr, momentum=m, dampening=d, weight_decay=wd, nesterov=n, maximize=mx))
            for lr, (m, d, n), wd, mx in itertools.product(
                (0.1, 3e-4), ((0.0, 0.0, False), (0.9, 0.0, True), (0.5, 0.3, False)), (0.0, 1e-2), (False, True))]
           + [("adamw", dict(lr=lr, beta1=b1, beta2=b2, weight_decay=wd, amsgrad=am, maximize=mx))
              for lr, (b1, b2), wd, am, mx in itertools.product(
                  (1e-3, 10.0), ((0.9, 0.999), (0.6, 0.5)), (0.0, 1e-2), (False, True), (False, True))])


@pytest.mark.parametrize("dtype,grad_dtype", [("float32", "float32"), ("bfloat16", "bfloat16"),
                                              ("bfloat16", "float32"), ("float32", "bfloat16")])
def test_one_call_is_the_per_node_path_byte_for_byte(dtype: str, grad_dtype: str) -> None:
    dt, gdt = getattr(tgrad, dtype), getattr(tgrad, grad_dtype)
    bad = [(kind, kw) for kind, kw in CONFIGS
           if run_steps(kind, dt, gdt, kw, True) != run_steps(kind, dt, gdt, kw, False)]
    assert not bad, bad[:5]


def test_mixed_groups_in_one_step() -> None:
    """bfloat16 and float32 parameters, first-step and later amsgrad states in one call list."""
    rng = np.random.default_rng(3)

    def run(one_call: bool) -> list[bytes]:
        ps = [tgrad.tensor(values(rng, (4, 3)), dtype=tgrad.float32).to(d) for d in (tgrad.bfloat16, tgrad.float32)]
        gs = [tgrad.tensor(values(rng, (4, 3)), dtype=tgrad.float32) for _ in ps]
        st: list[dict[str, Any]] = [{}, {}]
        OF.ONE_CALL = one_call
        try:
            OF.adamw_step(ps[:1], gs[:1], st[:1], amsgrad=True)  # the first has a vmax, the second not yet
            OF.adamw_step(ps, gs, st, amsgrad=True)
        finally:
            OF.ONE_CALL = True
        return [p.numpy().tobytes() for p in ps] + [st[i][k].numpy().tobytes() for i in (0, 1)
                                                    for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")]

    rng_state = rng.bit_generator.state
    got = run(True)
    rng.bit_generator.state = rng_state
    assert got == run(False)


# ---- a short training run pinned to main's bytes ----------------------------------------------
# sha256 of the run below (loss bits per step, then every parameter's bytes), made on main 286d5b7
# before this change with the command in the module docstring.
PINNED = "1cf1c48260f877fd59545ac89992c9dad61033b39ce0e0abdc037350fb08248a"


def training_digest() -> tuple[str, list[str]]:
    """A 12-16-8-5 MLP (bfloat16 parameters), AdamW (weight decay, amsgrad on the
    second half) and SGD (momentum, nesterov) for 3 steps each on a fixed batch, in the pairwise
    matmul order; the digest of its loss bits and final parameters, and the loss bits."""
    import tgrad.nn.functional as F
    from tgrad import nn

    rng = np.random.default_rng(2026)
    x = tgrad.tensor(rng.standard_normal((6, 12)).astype(np.float32), dtype=tgrad.bfloat16)
    y = tgrad.tensor(rng.integers(0, 5, 6).astype(np.int32), dtype=tgrad.int32)
    tgrad.manual_seed(5)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 5))
    params = list(model.parameters())
    losses = []
    with tgrad.matmul_order("pairwise"):
        for opt in (tgrad.optim.AdamW(params[:4], lr=1e-2, weight_decay=0.1),
                    tgrad.optim.AdamW(params[4:], lr=3e-3, amsgrad=True),
                    tgrad.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True)):
            for _ in range(3):
                for p in params:
                    p.grad = None
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                losses.append(f"{np.float32(loss.numpy(np.float32)).view(np.uint32):08x}")
    h = hashlib.sha256(" ".join(losses).encode())
    for p in params:
        h.update(p.numpy().tobytes())
    return h.hexdigest(), losses


def test_training_run_is_pinned_to_main() -> None:
    digest, losses = training_digest()
    assert digest == PINNED, losses


def test_training_run_same_both_paths() -> None:
    OF.ONE_CALL = False
    try:
        want = training_digest()
    finally:
        OF.ONE_CALL = True
    assert training_digest() == want


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("opt", ["AdamW", "SGD"])
def test_parameters_stay_leaves_and_nothing_accumulates(dtype: str, opt: str) -> None:
    """After a step each parameter still requires a gradient and has no history (a leaf: the next
    backward() stops there), and steps keep no earlier step's tensors alive. Before the one call,
    a float32 parameter's new value was the optimizer node's result: the second backward() walked
    into that node (NoGradientRuleError), and every step kept the last one's tensors (4 buffers
    per parameter and step)."""
    p = tgrad.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), dtype=getattr(tgrad, dtype)).requires_grad_()
    o = tgrad.optim.AdamW([p], lr=0.1) if opt == "AdamW" else tgrad.optim.SGD([p], lr=0.1, momentum=0.9)
    counts = []
    for _ in range(4):
        p.grad = None
        (p * p).sum().backward()
        o.step()
        counts.append(tgrad.live_buffers())
    assert p.requires_grad
    assert counts[1] == counts[2] == counts[3], counts


# ---- refusals ---------------------------------------------------------------------------------
def test_step_many_refuses_bad_calls_before_making_anything() -> None:
    from tgrad._ffi import ffi, lib

    x = tgrad.tensor(np.ones(4, np.float32), dtype=tgrad.float32)
    y = tgrad.tensor(np.ones(5, np.float32), dtype=tgrad.float32)
    h = tgrad.tensor(np.ones(4, np.float32), dtype=tgrad.bfloat16)
    i = tgrad.tensor(np.ones(4, np.int32), dtype=tgrad.int32)
    sc = [0.5] * 8
    live, bufs = tgrad.live_tensors(), tgrad.live_buffers()
    cases = [
        (errors.InvalidArgumentError, (99, 0, [[x, x]], [sc], False)),
        (errors.InvalidArgumentError, (_kernel.SGD, 0, [[x]], [sc], False)),                # too few inputs
        (errors.InvalidArgumentError, (_kernel.SGD, 0, [[x, x, x]], [sc], False)),          # no momentum: 2
        (errors.InvalidArgumentError, (_kernel.ADAMW, 1 << 10, [[x, x, x, x]], [sc], False)),
        (errors.ShapeMismatchError, (_kernel.SGD, 0, [[x, x], [x, y]], [sc, sc], False)),   # the second tensor
        (errors.DtypeUnsupportedError, (_kernel.SGD, 0, [[x, x], [h, x]], [sc, sc], False)),  # a bf16 master
        (errors.DtypeUnsupportedError, (_kernel.ADAMW, 0, [[x, x, x, h]], [sc], False)),    # a bf16 moment
        (errors.DtypeUnsupportedError, (_kernel.SGD, 0, [[x, i]], [sc], False)),            # an int32 grad
    ]
    for error, args in cases:
        with pytest.raises(error):
            _kernel.step_many(*args)
    hs = ffi.new("tgrad_tensor_t[]", [x._h, x._h])
    scs = ffi.new("float[]", 8)
    out = ffi.new("tgrad_tensor_t[]", [7, 7])
    for n, ninputs, bf16 in ((-1, 2, 0), (1, 2, 2), (1 << 21, 2, 0)):
        assert lib.tgrad_optim_step_many(_kernel.SGD, 0, n, ninputs, hs, scs, bf16, out) == \
            lib.TGRAD_ERR_INVALID_ARGUMENT
    assert lib.tgrad_optim_step_many(_kernel.SGD, 0, 0, 2, hs, scs, 0, out) == 0  # nothing to do
    assert list(out) == [7, 7]  # never written by a refused (or empty) call
    assert (tgrad.live_tensors(), tgrad.live_buffers()) == (live, bufs)


if __name__ == "__main__":
    print(training_digest()[0])
