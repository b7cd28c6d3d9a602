"""torch.optim's classes over tgrad.optim.functional: `Optimizer` (param_groups, state,
state_dict, load_state_dict, zero_grad), `SGD` and `AdamW`.

``step()`` reads each parameter's gradient as ``getattr(p, "grad", None)``: a Tensor of the
parameter's shape, bfloat16 or float32 (tgrad's gradient engine sets it; see docs/nn.md,
"Optimizers"); parameters whose grad is None are skipped, as in torch. Everything else is the
functional step of the parameter's group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .. import errors
from ..tensor import Tensor
from .functional import adamw_step, check_number, sgd_step

__all__ = ["AdamW", "Optimizer", "SGD"]


class Optimizer:
    """Parameter groups and per-parameter state (torch.optim.Optimizer's shape).

    ``param_groups``: a list of dicts, each with "params" (a list of Tensors) and the
    hyperparameters; ``state_of(p)``: the state dict of one parameter (``state`` maps id(p) to
    it: tgrad Tensors compare elementwise, so they are not dict keys)."""

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], defaults: dict[str, Any]) -> None:
        self.defaults = dict(defaults)
        self.state: dict[int, dict[str, Any]] = {}
        self.param_groups: list[dict[str, Any]] = []
        if isinstance(params, Tensor):
            raise errors.InvalidArgumentError(
                f"{type(self).__name__}: params must be an iterable of Tensors or of dicts, got one Tensor")
        groups: list[Any] = list(params)
        if not groups:
            raise errors.InvalidArgumentError(f"{type(self).__name__}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        seen: set[int] = set()
        for group in groups:
            self.add_param_group(group, _seen=seen)

    def _check_group(self, group: dict[str, Any]) -> None:
        raise NotImplementedError  # pragma: no cover - every optimizer defines it

    def add_param_group(self, param_group: dict[str, Any], _seen: set[int] | None = None) -> None:
        """Add a group: its "params" and any hyperparameters (the defaults fill the rest)."""
        name = type(self).__name__
        if not isinstance(param_group, dict) or "params" not in param_group:
            raise errors.InvalidArgumentError(f"{name}: a parameter group must be a dict with 'params'")
        params = param_group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        seen = _seen if _seen is not None else {id(p) for g in self.param_groups for p in g["params"]}
        for p in params:
            if not isinstance(p, Tensor):
                raise errors.InvalidArgumentError(f"{name}: a parameter must be a tgrad.Tensor, got {type(p).__name__}")
            if id(p) in seen or sum(q is p for q in params) > 1:
                raise errors.InvalidArgumentError(f"{name}: a parameter appears in more than one place")
        unknown = set(param_group) - set(self.defaults) - {"params"}
        if unknown:
            raise errors.InvalidArgumentError(f"{name}: unknown hyperparameter(s) {sorted(unknown)}")
        group = {**self.defaults, **param_group, "params": params}
        self._check_group(group)
        seen.update(id(p) for p in params)
        self.param_groups.append(group)

    def state_of(self, p: Tensor) -> dict[str, Any]:
        """The state dict of parameter p (created empty on first use)."""
        return self.state.setdefault(id(p), {})

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Every parameter's grad set to None (or, set_to_none=False, to zeros of its shape)."""
        import tgrad

        for group in self.param_groups:
            for p in group["params"]:
                g = getattr(p, "grad", None)
                if g is None:
                    continue
                p.grad = None if set_to_none else tgrad.zeros(*g.shape, dtype=g.dtype)

    def _step_group(self, group: dict[str, Any], params: list[Tensor], grads: list[Tensor],
                    states: list[dict[str, Any]]) -> None:
        raise NotImplementedError  # pragma: no cover

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter whose grad is not None; returns closure() if given. The
        update records no gradient history (torch's step runs under no_grad too): each parameter
        stays a leaf."""
        from ..autograd import no_grad

        loss = closure() if closure is not None else None
        with no_grad():
            for group in self.param_groups:
                chosen = [(p, g) for p in group["params"] if (g := getattr(p, "grad", None)) is not None]
                if chosen:
                    params = [p for p, _ in chosen]
                    self._step_group(group, params, [g for _, g in chosen], [self.state_of(p) for p in params])
        return loss

    def state_dict(self) -> dict[str, Any]:
        """{"state": {index: state dict}, "param_groups": [{hyperparameters, "params": [index]}]},
        parameters numbered in group order, as torch's. Tensors in it are the state's own
        (tgrad tensors are immutable)."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        state = {index[k]: dict(v) for k, v in self.state.items() if k in index and v}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what state_dict() gave (for the same parameters, in the same groups). Checked
        whole before anything changes: InvalidArgumentError or ShapeMismatchError otherwise."""
        import tgrad

        name = type(self).__name__
        try:
            groups, state = state_dict["param_groups"], state_dict["state"]
        except (KeyError, TypeError):
            raise errors.InvalidArgumentError(f"{name}: a state dict has 'state' and 'param_groups'") from None
        if len(groups) != len(self.param_groups) or any(
                len(g.get("params", ())) != len(mine["params"]) for g, mine in zip(groups, self.param_groups)):
            raise errors.InvalidArgumentError(f"{name}: the state dict's parameter groups do not match this optimizer's")
        by_index = {}
        for g, mine in zip(groups, self.param_groups):
            for i, p in zip(g["params"], mine["params"]):
                by_index[i] = p
        new_groups = []
        for g, mine in zip(groups, self.param_groups):
            group = {**{k: v for k, v in g.items() if k != "params"}, "params": mine["params"]}
            unknown = set(group) - set(self.defaults) - {"params"}
            if unknown:
                raise errors.InvalidArgumentError(f"{name}: unknown hyperparameter(s) {sorted(unknown)}")
            self._check_group(group)
            new_groups.append(group)
        new_state: dict[int, dict[str, Any]] = {}
        for i, entry in state.items():
            p = by_index.get(i)
            if p is None or not isinstance(entry, dict):
                raise errors.InvalidArgumentError(f"{name}: state entry {i!r} names no parameter")
            for key, value in entry.items():
                if isinstance(value, Tensor):
                    if value.shape != p.shape or value.dtype is not tgrad.float32:
                        raise errors.ShapeMismatchError(
                            f"{name}: state {i}[{key!r}] is {value.dtype}{list(value.shape)}; expected "
                            f"float32{list(p.shape)}")
            new_state[id(p)] = dict(entry)
        self.param_groups = new_groups
        self.state = new_state

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(g.items()) if k != "params"]
        return "\n".join(lines + [")"])



def _torch_only(user: str, **flags: bool) -> None:
    """torch's implementation switches: foreach and fused are accepted and change nothing (the
    update is always the documented single-tensor arithmetic); capturable and differentiable
    (CUDA graphs, autograd through the step) must be False."""
    for name, value in flags.items():
        if value:
            raise errors.InvalidArgumentError(f"{user}: {name}=True is not supported")


class SGD(Optimizer):
    """torch.optim.SGD: lr, momentum, dampening, weight_decay, nesterov, maximize; float32
    momentum buffers and master weights for bfloat16 parameters (tgrad.optim.functional)."""

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None, differentiable: bool = False,
                 fused: bool | None = None) -> None:
        _torch_only("SGD", differentiable=differentiable)
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize})

    def _check_group(self, group: dict[str, Any]) -> None:
        user = "SGD"
        check_number(group["lr"], "lr", user)
        momentum = check_number(group["momentum"], "momentum", user)
        dampening = check_number(group["dampening"], "dampening", user, low=-float("inf"))
        check_number(group["weight_decay"], "weight_decay", user)
        if group["nesterov"] and (momentum <= 0 or dampening != 0):
            raise errors.InvalidArgumentError(f"{user}: nesterov needs momentum > 0 and dampening = 0")

    def _step_group(self, group: dict[str, Any], params: list[Tensor], grads: list[Tensor],
                    states: list[dict[str, Any]]) -> None:
        sgd_step(params, grads, states, lr=group["lr"], momentum=group["momentum"], dampening=group["dampening"],
                 weight_decay=group["weight_decay"], nesterov=bool(group["nesterov"]),
                 maximize=bool(group["maximize"]))


class AdamW(Optimizer):
    """torch.optim.AdamW: lr, betas, eps, weight_decay, amsgrad, maximize; float32 exp_avg,
    exp_avg_sq (and max_exp_avg_sq) and master weights for bfloat16 parameters."""

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, *, maximize: bool = False, foreach: bool | None = None,
                 capturable: bool = False, differentiable: bool = False, fused: bool | None = None) -> None:
        _torch_only("AdamW", capturable=capturable, differentiable=differentiable)
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad, "maximize": maximize})

    def _check_group(self, group: dict[str, Any]) -> None:
        user = "AdamW"
        check_number(group["lr"], "lr", user)
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise errors.InvalidArgumentError(f"{user}: betas must be a pair of numbers, got {betas!r}")
        check_number(betas[0], "beta1", user, high=1.0, high_open=True)
        check_number(betas[1], "beta2", user, high=1.0, high_open=True)
        check_number(group["eps"], "eps", user)
        check_number(group["weight_decay"], "weight_decay", user)

    def _step_group(self, group: dict[str, Any], params: list[Tensor], grads: list[Tensor],
                    states: list[dict[str, Any]]) -> None:
        b1, b2 = group["betas"]
        adamw_step(params, grads, states, lr=group["lr"], beta1=b1, beta2=b2, eps=group["eps"],
                   weight_decay=group["weight_decay"], amsgrad=bool(group["amsgrad"]),
                   maximize=bool(group["maximize"]))
