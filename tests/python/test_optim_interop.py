"""tgrad.optim, the losses and clip_grad_norm_ against torch's float32 CPU implementations
(single-tensor, foreach=False): the optimizers' documented arithmetic is torch's op for op, so
SGD's parameters and buffers and AdamW's moments are the same bytes after several steps (AdamW's
parameters within one step's bound: torch's float32 sqrt is not correctly rounded); the losses and the total norm
sum in another order than torch's (tgrad's sums are correctly rounded), so they agree within a
stated bound."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tgrad
import tgrad.nn.functional as F
from tgrad.nn.utils import clip_grads_by_norm
from tgrad.optim import functional as OF

torch = pytest.importorskip("torch", reason="torch is not installed")
pytestmark = pytest.mark.interop

U = 2.0 ** -24


def f32(a: Any) -> tgrad.Tensor:
    return tgrad.tensor(np.asarray(a, np.float32), dtype=tgrad.float32)


SGD_CASES = [dict(lr=0.1), dict(lr=0.1, momentum=0.9, weight_decay=0.01),
             dict(lr=0.03, momentum=0.9, weight_decay=0.01, nesterov=True),
             dict(lr=0.1, momentum=0.5, dampening=0.1, maximize=True)]
ADAMW_CASES = [dict(lr=1e-3), dict(lr=1e-2, amsgrad=True, weight_decay=0.1), dict(lr=1e-2, betas=(0.3, 0.99)),
               dict(lr=3e-3, eps=1e-3, weight_decay=0.0, maximize=True)]


@pytest.mark.parametrize("kind,kw", [("sgd", c) for c in SGD_CASES] + [("adamw", c) for c in ADAMW_CASES])
def test_optimizer_steps_are_torchs_bytes(rng: np.random.Generator, kind: str, kw: dict[str, Any]) -> None:
    # Sizes a multiple of 64: torch's vector kernels fuse (fmadd) every element; a scalar tail
    # may be compiled differently.
    P = rng.standard_normal((4, 64)).astype(np.float32)
    tp = torch.from_numpy(P.copy()).requires_grad_()
    opt = (torch.optim.SGD if kind == "sgd" else torch.optim.AdamW)([tp], foreach=False, **kw)
    p, state = f32(P), [{}]
    args = dict(kw)
    if kind == "adamw":
        args["beta1"], args["beta2"] = args.pop("betas", (0.9, 0.999))
    for _ in range(6):
        g = rng.standard_normal((4, 64)).astype(np.float32)
        tp.grad = torch.from_numpy(g)
        opt.step()
        (OF.sgd_step if kind == "sgd" else OF.adamw_step)([p], [f32(g)], state, **args)
        ours, theirs_p = p.numpy(), tp.detach().numpy()
        if kind == "sgd":
            assert ours.tobytes() == theirs_p.tobytes()
        else:  # torch's float32 sqrt is not correctly rounded (0.5% of elements 1 ulp off): bounded
            tp.data = torch.from_numpy(ours.copy())  # so the bound stays per step
            assert np.all(np.abs(ours - theirs_p) <= 4 * U * (np.abs(theirs_p) + args["lr"]))
    theirs = opt.state[tp]
    for key in ("momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
        if key in state[0]:
            assert state[0][key].numpy().tobytes() == theirs[key].numpy().tobytes(), key


@pytest.mark.parametrize("kw", [{}, {"label_smoothing": 0.1}, {"weight": True}, {"ignore_index": 1}])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_torch(rng: np.random.Generator, kw: dict[str, Any], reduction: str) -> None:
    x = (rng.standard_normal((16, 10, 2)) * 3).astype(np.float32)
    t = rng.integers(0, 10, (16, 2)).astype(np.int32)
    t[0, 0] = kw.get("ignore_index", -100)
    w = rng.random(10).astype(np.float32) + 0.5
    tk = {k: v for k, v in kw.items() if k != "weight"}
    ours = F.cross_entropy(f32(x), tgrad.tensor(t, dtype=tgrad.int32), weight=f32(w) if "weight" in kw else None,
                           reduction=reduction, **tk).numpy()
    tw = torch.from_numpy(w) if "weight" in kw else None
    args = (torch.from_numpy(t).long(),)
    theirs = torch.nn.functional.cross_entropy(torch.from_numpy(x), *args, weight=tw, reduction=reduction, **tk)
    exact = torch.nn.functional.cross_entropy(torch.from_numpy(x).double(), *args, weight=None if tw is None else
                                              tw.double(), reduction=reduction, **tk).numpy()
    # ours is within 8 roundings of the float64 value (test_losses.py); torch's float32 within
    # its own, looser error (its log_softmax and sums are not correctly rounded).
    assert np.all(np.abs(ours - exact) <= 8 * U * np.abs(exact) + 1e-30)
    assert np.all(np.abs(ours - theirs.numpy()) <= 64 * U * np.abs(exact) + 1e-30)


def test_mse_loss_matches_torch(rng: np.random.Generator) -> None:
    x, y = rng.standard_normal((8, 33)).astype(np.float32), rng.standard_normal((8, 33)).astype(np.float32)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    assert F.mse_loss(f32(x), f32(y), reduction="none").numpy().tobytes() == \
        torch.nn.functional.mse_loss(tx, ty, reduction="none").numpy().tobytes()
    for reduction in ("mean", "sum"):
        exact = torch.nn.functional.mse_loss(tx.double(), ty.double(), reduction=reduction).item()
        ours = float(F.mse_loss(f32(x), f32(y), reduction=reduction))
        assert abs(ours - exact) <= 3 * U * abs(exact)


def test_clip_grad_norm_matches_torch(rng: np.random.Generator) -> None:
    G = [rng.standard_normal(s).astype(np.float32) * 2 for s in ((3, 5), (64,), (17, 9))]
    for norm_type in (2.0, 1.0, float("inf"), 3.0):
        ps = [torch.zeros(g.shape, requires_grad=True) for g in G]
        for p, g in zip(ps, G):
            p.grad = torch.from_numpy(g.copy())
        theirs = torch.nn.utils.clip_grad_norm_(ps, 1.0, norm_type, foreach=False).item()
        clipped, total = clip_grads_by_norm([f32(g) for g in G], 1.0, norm_type)
        assert abs(float(total) - theirs) <= 16 * U * theirs
        for c, p in zip(clipped, ps):
            assert np.all(np.abs(c.numpy() - p.grad.numpy()) <= 32 * U * np.abs(p.grad.numpy()) + 1e-30)


def test_signatures_are_torchs() -> None:
    import inspect

    pairs = [(tgrad.optim.SGD.__init__, torch.optim.SGD.__init__), (tgrad.optim.AdamW.__init__, torch.optim.AdamW.__init__),
             (tgrad.nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad_norm_),
             (tgrad.nn.utils.clip_grad_value_, torch.nn.utils.clip_grad_value_)]
    for ours, theirs in pairs:
        a, b = inspect.signature(ours).parameters.values(), inspect.signature(theirs).parameters.values()
        assert [(p.name, p.kind) for p in a] == [(p.name, p.kind) for p in b], ours
