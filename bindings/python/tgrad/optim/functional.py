"""The optimizers' arithmetic as functions of explicit gradients: `sgd_step` and `adamw_step`.

Each takes the parameters (Tensors, bfloat16 or float32), their gradients (same shapes, bfloat16
or float32: read exactly as float32) and one state dict per parameter (filled on the first step),
and gives every parameter its new value in place (the same Python object holds the new tensor).
State is float32: ``momentum_buffer``; ``step`` (an int), ``exp_avg``, ``exp_avg_sq``,
``max_exp_avg_sq``; and for a bfloat16 parameter ``master``, its float32 master weight: the
update runs on the master, and the parameter becomes the master rounded once to bfloat16.

The arithmetic is torch's single-tensor (``foreach=False``) float32 update, op by op, each op
rounded once to float32 (docs/numerics.md, "Optimizers"); ``fma(a, s, c)`` is RN(c + a*s), one
rounding (tgrad.optim._arith.mul_add), where torch's CPU kernels fuse:

SGD   g = grad (negated if maximize); g = fma(P, wd, g) if wd; with momentum: buf = g on the
      first step, else buf = fma(g, 1 - dampening, RN(buf * momentum)); g = fma(buf, momentum, g)
      if nesterov else buf; P = fma(g, -lr, P).
AdamW step += 1; P = RN(P * (1 - lr*wd)); d = RN(g - m); m = fma(d, 1-b1, m) (1-b1 < 0.5,
      else fma(d, RN(RN(1-b1) - 1), g): torch's lerp); v = fma(RN(g*(1-b2)), g, RN(v*b2));
      with amsgrad vmax = max(vmax, v) and v := vmax below; denom = RN(RN(RN(sqrt(v)) / c2) + eps);
      P = RN(P + RN(RN(m * -step_size) / denom)); with c2 = sqrt(1 - b2**step),
      step_size = lr / (1 - b1**step) computed in double as torch does, and every scalar rounded
      once to float32 where it meets a tensor.
Each step runs as libtgrad's optimizer kind (kind 16, ``tgrad_optim_step``: this arithmetic per
element in C, ``fmaf`` for fma); ``USE_KERNEL = False`` runs the composition of library ops
instead, the reference its bytes are tested against (docs/nn.md, "Optimizers").
Bad arguments raise a typed error before anything changes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .. import errors
from ..tensor import Tensor
from . import _kernel, _rebind
from ._arith import as_f32, f32, mul_add

__all__ = ["adamw_step", "sgd_step"]

# True: each step is libtgrad's optimizer kind (kind 16, C, fmaf); False: the composition of
# library ops below (the reference the tests compare the kernel's bytes against).
USE_KERNEL = True
# With USE_KERNEL: True runs every tensor's step in one C call (tgrad_optim_step_many: each
# element's inputs read once, every output written, realized); False, one lazy node of the kind
# per output and a cast per bfloat16 parameter, each realized alone (the same bytes: the tests
# compare the two). Parameters on a GPU device always take the lazy nodes (the kind's GPU route;
# the one call is the CPU's).
ONE_CALL = True


def _tgrad() -> Any:
    import tgrad

    return tgrad


def check_number(value: Any, name: str, user: str, *, low: float = 0.0, high: float | None = None,
                 high_open: bool = False) -> float:
    """A real number in [low, high] (or [low, high)); InvalidArgumentError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or isinstance(value, complex):
        raise errors.InvalidArgumentError(f"{user}: {name} must be a number, got {type(value).__name__}")
    v = float(value)
    bad = not math.isfinite(v) or v < low or (high is not None and (v >= high if high_open else v > high))
    if bad:
        span = f"[{low}, {high}{')' if high_open else ']'}" if high is not None else f">= {low}"
        raise errors.InvalidArgumentError(f"{user}: invalid {name} {value!r} (expected {span})")
    return v


def _check_lists(params: Sequence[Tensor], grads: Sequence[Tensor], state: Sequence[dict[str, Any]],
                 user: str) -> None:
    tg = _tgrad()
    if not (len(params) == len(grads) == len(state)):
        raise errors.InvalidArgumentError(
            f"{user}: {len(params)} params, {len(grads)} grads and {len(state)} state dicts; they must match")
    seen: set[int] = set()
    for i, (p, g, s) in enumerate(zip(params, grads, state)):
        for t, what in ((p, "param"), (g, "grad")):
            if not isinstance(t, Tensor):
                raise errors.InvalidArgumentError(f"{user}: {what} {i} must be a tgrad.Tensor, got {type(t).__name__}")
            if t.dtype not in (tg.bfloat16, tg.float32):
                raise errors.DtypeUnsupportedError(f"{user}: {what} {i} is {t.dtype}; expected bfloat16 or float32")
        if g.shape != p.shape:
            raise errors.ShapeMismatchError(f"{user}: grad {i} is {list(g.shape)}, its param {list(p.shape)}")
        if not isinstance(s, dict):
            raise errors.InvalidArgumentError(f"{user}: state {i} must be a dict, got {type(s).__name__}")
        if id(p) in seen:
            raise errors.InvalidArgumentError(f"{user}: param {i} appears twice")
        seen.add(id(p))
        for key, value in s.items():
            if isinstance(value, Tensor) and (value.shape != p.shape or value.dtype is not tg.float32):
                raise errors.ShapeMismatchError(
                    f"{user}: state {i}[{key!r}] is {value.dtype}{list(value.shape)}; expected float32{list(p.shape)}")


def _on_cpu(params: Sequence[Tensor]) -> bool:
    """Every parameter lives on the CPU (the one-call step's device)."""
    return all(p.device == "cpu" for p in params)


def _master(p: Tensor, s: dict[str, Any]) -> Tensor:
    """The float32 value the update runs on: the parameter itself, or a bf16 one's master."""
    tg = _tgrad()
    if p.dtype is tg.float32:
        return p
    m = s.get("master")
    return m if m is not None else p.to(tg.float32)


def _commit(pairs: list[tuple[Tensor, Tensor, dict[str, Any], dict[str, Any]]], user: str) -> None:
    """Realize every new value, then give each parameter its value and each state its tensors."""
    tg = _tgrad()
    rebinds = []
    for p, new_master, s, updates in pairs:
        if p.dtype is tg.float32:
            rebinds.append((p, new_master))
        else:
            updates["master"] = new_master
            rebinds.append((p, new_master.to(tg.bfloat16)))
        for value in updates.values():
            if isinstance(value, Tensor):
                value.realize()
    _rebind.rebind_all(rebinds, user)
    for _, _, s, updates in pairs:
        s.update(updates)


#: One parameter's part of a one-call step: (param, inputs, scalars, state, updates).
_Job = tuple[Tensor, list[Tensor], list[float], dict[str, Any], dict[str, Any]]


def _run_many(algo: int, flags: int, jobs: list[_Job], names: tuple[str, ...], user: str) -> None:
    """The one-call path: jobs (param, inputs, scalars, state, updates) grouped by input count and
    parameter dtype, one tgrad_optim_step_many each (results realized); every result is made
    before any parameter or state changes. names: the state keys of the outputs after the
    parameter's."""
    tg = _tgrad()
    groups: dict[tuple[int, bool], list[Any]] = {}
    for job in jobs:
        groups.setdefault((len(job[1]), job[0].dtype is tg.bfloat16), []).append(job)
    done = []
    for (_, bf16), group in groups.items():
        results = _kernel.step_many(algo, flags, [j[1] for j in group], [j[2] for j in group], bf16)
        for (p, _, _, s, updates), res in zip(group, results):
            if bf16:
                updates["master"] = res[0]
            updates.update(zip(names, res[1:]))
            new = res[-1] if bf16 else res[0]
            _rebind.check_same(p, new, user)
            done.append((p, new, s, updates))
    for p, new, s, updates in done:  # the new values in place: p's object holds new's handle
        _rebind.swap(p, new)
        s.update(updates)


def sgd_step(params: Sequence[Tensor], grads: Sequence[Tensor], state: Sequence[dict[str, Any]], *, lr: float,
             momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
             maximize: bool = False) -> None:
    """One SGD step (torch.optim.SGD's update; the module's docstring gives the arithmetic)."""
    user = "sgd_step"
    lr = check_number(lr, "lr", user)
    momentum = check_number(momentum, "momentum", user)
    dampening = check_number(dampening, "dampening", user, low=-math.inf)
    weight_decay = check_number(weight_decay, "weight_decay", user)
    if nesterov and (momentum <= 0 or dampening != 0):
        raise errors.InvalidArgumentError(f"{user}: nesterov needs momentum > 0 and dampening = 0")
    _check_lists(params, grads, state, user)
    pairs = []
    if USE_KERNEL and ONE_CALL and _on_cpu(params):
        flags = ((_kernel.MAXIMIZE if maximize else 0) | (_kernel.DECAY if weight_decay != 0 else 0)
                 | (_kernel.MOMENTUM if momentum != 0 else 0) | (_kernel.NESTEROV if nesterov else 0))
        sc = [weight_decay, momentum, 1.0 - dampening, -lr]
        jobs: list[_Job] = []
        for p, grad, s in zip(params, grads, state):
            buf = s.get("momentum_buffer") if momentum != 0 else None
            jobs.append((p, [_master(p, s), grad] + ([buf] if buf is not None else []), sc, s, {}))
        _run_many(_kernel.SGD, flags, jobs, ("momentum_buffer",) if momentum != 0 else (), user)
        return
    for p, grad, s in zip(params, grads, state):
        master = _master(p, s)
        g = as_f32(grad)
        if USE_KERNEL:
            flags = ((_kernel.MAXIMIZE if maximize else 0) | (_kernel.DECAY if weight_decay != 0 else 0)
                     | (_kernel.MOMENTUM if momentum != 0 else 0) | (_kernel.NESTEROV if nesterov else 0))
            ins = [master, g] + ([s["momentum_buffer"]] if momentum != 0 and s.get("momentum_buffer") is not None else [])
            sc = [weight_decay, momentum, 1.0 - dampening, -lr]
            updates_k: dict[str, Any] = {}
            if momentum != 0:
                updates_k["momentum_buffer"] = _kernel.step(_kernel.SGD, 1, flags, ins, sc)
            pairs.append((p, _kernel.step(_kernel.SGD, 0, flags, ins, sc), s, updates_k))
            continue
        if maximize:
            g = -g
        if weight_decay != 0:
            g = mul_add(g, master, weight_decay)
        updates: dict[str, Any] = {}
        if momentum != 0:
            buf = s.get("momentum_buffer")
            buf = g * 1.0 if buf is None else mul_add(buf * f32(momentum), g, 1.0 - dampening)  # * 1.0: a copy
            updates["momentum_buffer"] = buf
            g = mul_add(g, buf, momentum) if nesterov else buf
        pairs.append((p, mul_add(master, g, -lr), s, updates))
    _commit(pairs, user)


def adamw_step(params: Sequence[Tensor], grads: Sequence[Tensor], state: Sequence[dict[str, Any]], *,
               lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
               weight_decay: float = 1e-2, amsgrad: bool = False, maximize: bool = False) -> None:
    """One AdamW step (torch.optim.AdamW's update; the module's docstring gives the arithmetic)."""
    tg = _tgrad()
    user = "adamw_step"
    lr = check_number(lr, "lr", user)
    beta1 = check_number(beta1, "beta1", user, high=1.0, high_open=True)
    beta2 = check_number(beta2, "beta2", user, high=1.0, high_open=True)
    eps = check_number(eps, "eps", user)
    weight_decay = check_number(weight_decay, "weight_decay", user)
    _check_lists(params, grads, state, user)
    for i, s in enumerate(state):
        step = s.get("step", 0)
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise errors.InvalidArgumentError(f"{user}: state {i}['step'] must be an int >= 0, got {step!r}")
    pairs = []
    if USE_KERNEL and ONE_CALL and _on_cpu(params):
        flags = ((_kernel.MAXIMIZE if maximize else 0) | (_kernel.DECAY if weight_decay != 0 else 0)
                 | (_kernel.AMSGRAD if amsgrad else 0))
        w = f32(1 - beta1)
        jobs: list[_Job] = []
        for p, grad, s in zip(params, grads, state):
            step = s.get("step", 0) + 1
            m, v = s.get("exp_avg"), s.get("exp_avg_sq")
            if m is None or v is None:
                zeros = tg.zeros(*p.shape, dtype=tg.float32, device=p.device)
                m, v = (zeros if m is None else m), (zeros if v is None else v)
            sc = [1 - lr * weight_decay, w, f32(w - 1.0), beta2, 1 - beta2, (1 - beta2 ** step) ** 0.5, eps,
                  -(lr / (1 - beta1 ** step))]
            vmax = s.get("max_exp_avg_sq") if amsgrad else None
            jobs.append((p, [_master(p, s), grad, m, v] + ([vmax] if vmax is not None else []), sc, s,
                         {"step": step}))
        _run_many(_kernel.ADAMW, flags, jobs,
                  ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if amsgrad else ("exp_avg", "exp_avg_sq"), user)
        return
    for p, grad, s in zip(params, grads, state):
        master = _master(p, s)
        g = as_f32(grad)
        if maximize:
            g = -g
        step = s.get("step", 0) + 1
        zeros = None
        m = s.get("exp_avg")
        v = s.get("exp_avg_sq")
        if m is None or v is None:
            zeros = tg.zeros(*p.shape, dtype=tg.float32, device=p.device)
            m, v = (zeros if m is None else m), (zeros if v is None else v)
        if USE_KERNEL:
            bias_correction1 = 1 - beta1 ** step
            w = f32(1 - beta1)
            sc = [1 - lr * weight_decay, w, f32(w - 1.0), beta2, 1 - beta2, (1 - beta2 ** step) ** 0.5, eps,
                  -(lr / bias_correction1)]
            flags = ((_kernel.MAXIMIZE if maximize else 0) | (_kernel.DECAY if weight_decay != 0 else 0)
                     | (_kernel.AMSGRAD if amsgrad else 0))
            ins = [master, as_f32(grad), m, v]  # the kernel negates it for maximize
            if amsgrad and s.get("max_exp_avg_sq") is not None:
                ins.append(s["max_exp_avg_sq"])
            upd: dict[str, Any] = {"step": step, "exp_avg": _kernel.step(_kernel.ADAMW, 1, flags, ins, sc),
                                   "exp_avg_sq": _kernel.step(_kernel.ADAMW, 2, flags, ins, sc)}
            if amsgrad:
                upd["max_exp_avg_sq"] = _kernel.step(_kernel.ADAMW, 3, flags, ins, sc)
            pairs.append((p, _kernel.step(_kernel.ADAMW, 0, flags, ins, sc), s, upd))
            continue
        if weight_decay != 0:
            master = master * f32(1 - lr * weight_decay)
        d = g - m
        w = f32(1 - beta1)
        m = mul_add(m, d, w) if abs(w) < 0.5 else mul_add(g, d, f32(w - 1.0))
        v = mul_add(v * f32(beta2), g * f32(1 - beta2), g)
        updates: dict[str, Any] = {"step": step, "exp_avg": m, "exp_avg_sq": v}
        if amsgrad:
            vmax = s.get("max_exp_avg_sq")
            vmax = v if vmax is None else tg.maximum(vmax, v)
            updates["max_exp_avg_sq"] = vmax
            v = vmax
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        denom = tg.sqrt(v) / f32(bias_correction2 ** 0.5) + f32(eps)
        pairs.append((p, master + (m * f32(-step_size)) / denom, s, updates))
    _commit(pairs, user)
