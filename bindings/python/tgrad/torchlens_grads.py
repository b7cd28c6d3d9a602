"""Derived gradients for the torchlens backend (``grad_options=``; docs/interop.md).

`derive` runs fn a second time under a recorder that marks every float tensor it records as
requiring a gradient (so each keeps its history), checks that the run did the ops the trace
recorded with the same outputs bit for bit, builds the loss (``loss_fn(output)``, or the sum of
every output), and asks tgrad's engine for d loss / d (every recorded intermediate, every
differentiated input) in one `tgrad_grad` call, in float32. `check` recomputes those gradients
with torch float64 autograd, op by op over the recorded forward values (each op's local
vector-Jacobian product at its recorded inputs, chained from the outputs back), for validation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import errors
from ._ffi import lib
from .autograd import enable_grad, grads_of
from .tensor import _RECORDER, Tensor
from .trace import SOURCE_KINDS, ZERO_COPY_KINDS, Trace, _output_tensors, _Recorder
from .trace_kinds import payload_bits, values_of

__all__ = ["GradOptions", "Derived", "derive", "check"]

_FLOAT = ("bfloat16", "float32")


@dataclasses.dataclass(frozen=True)
class GradOptions:
    """torchlens' derived-gradient options, with the fields of its tinygrad backend's
    ``GradOptions``: ``loss_fn`` (fn's raw output -> a one-element tgrad Tensor; None: the sum of
    every output Tensor), ``input_grad_argnums`` (positional inputs whose gradients go to
    ``trace.derived_grads``; None: every Tensor input) and ``intermediate_grads`` (record each
    op's gradient as ``trace.intermediate_derived_grads``)."""

    loss_fn: Callable[[Any], Any] | None = None
    input_grad_argnums: tuple[int, ...] | None = None
    intermediate_grads: bool = False

    def __init__(self, *, loss_fn: Callable[[Any], Any] | None = None,
                 input_grad_argnums: Sequence[int] | None = None, intermediate_grads: bool = False) -> None:
        object.__setattr__(self, "loss_fn", loss_fn)
        object.__setattr__(self, "input_grad_argnums",
                           None if input_grad_argnums is None else tuple(input_grad_argnums))
        object.__setattr__(self, "intermediate_grads", bool(intermediate_grads))


@dataclasses.dataclass
class Derived:
    """What `derive` found: float32 gradients by op id (intermediates, and the inputs)."""

    intermediates: dict[int, np.ndarray]
    inputs: dict[int, tuple[int, np.ndarray]]  # op id -> (argnum, gradient)
    skipped: dict[int, str]                    # op id -> why no record (a shared-buffer view)
    seeded_by_loss_fn: bool


def options_of(value: Any) -> GradOptions:
    """Our GradOptions, or one with the same fields (torchlens' tinygrad GradOptions)."""
    if isinstance(value, GradOptions):
        return value
    fields = ("loss_fn", "input_grad_argnums", "intermediate_grads")
    if all(hasattr(value, f) for f in fields):
        return GradOptions(**{f: getattr(value, f) for f in fields})
    raise errors.InvalidArgumentError(
        f"grad_options is a {type(value).__name__}; give tgrad.torchlens_provider.GradOptions(...)")


class _MarkingRecorder(_Recorder):
    """tgrad.trace's recorder, marking each float tensor it records as requiring a gradient (the
    earlier marks kept, to be restored)."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[tuple[Tensor, bool]] = []

    def add(self, tensor: Tensor, kind: str, inputs: tuple[int, ...], args: dict[str, Any], origin: str) -> int:
        op_id = super().add(tensor, kind, inputs, args, origin)
        if tensor.dtype.name in _FLOAT:
            self.marks.append((tensor, tensor.requires_grad))
            errors._check(lib.tgrad_tensor_set_requires_grad(tensor._h, 1))
        return op_id

    def restore(self) -> None:
        for tensor, flag in reversed(self.marks):
            if tensor._handle:
                lib.tgrad_tensor_set_requires_grad(tensor._h, int(flag))
        self.marks.clear()


def _argnums(value: tuple[int, ...] | None, args: Sequence[Any]) -> list[int]:
    if value is None:
        return [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    out = sorted({i + len(args) if i < 0 else i for i in value})
    bad = [i for i in out if not 0 <= i < len(args) or not isinstance(args[i], Tensor)]
    if bad:
        raise errors.InvalidArgumentError(
            f"grad_options: input_grad_argnums {list(value)} names {bad}, not Tensor inputs among {len(args)}")
    return out


def _loss(options: GradOptions, result: Any, outputs: list[Tensor]) -> Tensor:
    if options.loss_fn is None:
        loss = outputs[0].sum(dtype="float32")
        for t in outputs[1:]:
            loss = loss + t.sum(dtype="float32")
        return loss
    loss = options.loss_fn(result)
    if not isinstance(loss, Tensor) or loss.dtype.name not in _FLOAT or int(np.prod(loss.shape)) != 1:
        raise errors.InvalidArgumentError(
            f"grad_options: loss_fn returned {type(loss).__name__} "
            f"{getattr(loss, 'shape', '')}; it must return a one-element float tgrad Tensor")
    return loss


def _exact_views(ops: Sequence[Any], tensors: Sequence[Tensor]) -> dict[int, str]:
    """View ops whose gradient tgrad cannot give on its own: the engine's cotangent belongs to the
    buffer, so a view's is exact only when every reader of that buffer reads it through the view."""
    buffer = [t.buffer_id for t in tensors]
    readers: dict[int, list[int]] = {}
    for op in ops:
        for i in op.inputs:
            readers.setdefault(i, []).append(op.id)
    skipped: dict[int, str] = {}
    for op in ops:
        if op.kind in SOURCE_KINDS or op.kind not in ZERO_COPY_KINDS | {"reshape", "contiguous"}:
            continue
        group = {o.id for o in ops if buffer[o.id] == buffer[op.id]}
        mine = {op.id}
        for o in ops:  # views of this view, in creation order
            if o.id in group and any(i in mine for i in o.inputs):
                mine.add(o.id)
        if len(mine) == len(group):
            continue
        foreign = [r for g in group - mine for r in readers.get(g, []) if r not in group]
        if foreign:
            skipped[op.id] = "a view whose buffer is also read without it: no per-view gradient"
    return skipped


def derive(model: Callable[..., Any], args: Sequence[Any], recorded: Trace, value: Any) -> Derived:
    """Run fn again with history, check it against the trace, and take every gradient in one
    tgrad_grad call. Raises (changing nothing) NoGradientRuleError when a kind on the way has no
    rule, InvalidArgumentError when the run differs from the trace or the loss is not one element."""
    options = options_of(value)
    argnums = _argnums(options.input_grad_argnums, args)
    if not argnums and not options.intermediate_grads:
        raise errors.InvalidArgumentError("grad_options: no Tensor input to differentiate and "
                                          "intermediate_grads=False: nothing to derive")
    rec = _MarkingRecorder()
    try:
        for t in args:
            if isinstance(t, Tensor) and t._handle not in rec.by_handle:
                rec.add(t, "input", (), {}, "argument")
        token = _RECORDER.set(rec)
        try:
            with enable_grad():
                result = model(*args)
        finally:
            _RECORDER.reset(token)
        outputs = _output_tensors(result)
        output_ids = [rec.op_of(t) for t in outputs]
        same = (len(rec.ops) == len(recorded.ops) and output_ids == list(recorded.outputs)
                and all((a.kind, a.inputs) == (b.kind, b.inputs) for a, b in zip(rec.ops, recorded.ops)))
        if not same:
            raise errors.InvalidArgumentError(
                "grad_options: fn made other ops on its gradient run than on the traced one "
                "(fn must be a pure function of its inputs)")
        with enable_grad():
            loss = _loss(options, result, outputs)
        inner = [o.id for o in rec.ops if o.kind not in SOURCE_KINDS and rec.tensors[o.id].dtype.name in _FLOAT] \
            if options.intermediate_grads else []
        by_arg = {}
        for n in argnums:
            at = rec.by_handle[args[n]._handle]
            if rec.tensors[at].dtype.name in _FLOAT:
                by_arg[at] = n
        wanted = inner + list(by_arg)
        try:
            grads = grads_of([loss], None, [rec.tensors[i] for i in wanted], "float32") if wanted else []
        except errors.NoGradientRuleError as exc:
            raise errors.NoGradientRuleError(
                f"torchlens backend 'tgrad': grad_options cannot be honoured: {exc}; nothing was recorded "
                "(trace without grad_options for the forward alone)") from None
        for i in output_ids:
            bits = payload_bits(rec.tensors[i].numpy())
            payload = recorded.ops[i].payload
            if payload is None or not np.array_equal(bits, payload):
                raise errors.InvalidArgumentError(
                    f"grad_options: fn's output (op {i}) differs on its gradient run from the traced one")
        values = {}
        for i, g in zip(wanted, grads):
            shape = tuple(rec.tensors[i].shape)
            values[i] = np.zeros(shape, np.float32) if g is None else np.asarray(g.numpy(), np.float32)
        skipped = _exact_views(rec.ops, rec.tensors) if options.intermediate_grads else {}
        return Derived({i: values[i] for i in inner if i not in skipped},
                       {i: (n, values[i]) for i, n in by_arg.items()}, skipped,
                       options.loss_fn is not None)
    finally:
        rec.restore()
        rec.tensors.clear()
        rec.by_handle.clear()


# ---- validation: torch float64 autograd over the recorded forward values -------------------------
def _torch_fn(kind: str, args: dict[str, Any]) -> Callable[..., Any] | None:
    import torch  # type: ignore[import-not-found, unused-ignore]

    unary: dict[str, Callable[..., Any]] = {"neg": torch.neg, "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
             "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
             "square": torch.square, "abs": torch.abs, "sin": torch.sin, "cos": torch.cos,
             "log1p": torch.log1p, "silu": torch.nn.functional.silu,
             "gelu": torch.nn.functional.gelu,
             "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}
    binary: dict[str, Callable[..., Any]] = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
              "maximum": torch.maximum, "minimum": torch.minimum, "pow": torch.pow,
              "matmul": torch.matmul}
    if kind in unary:
        return unary[kind]
    if kind in binary:
        return binary[kind]
    if kind == "transpose":
        pair: list[int] | None = args.get("axes")
        if pair is None:
            return lambda x: x.permute(*reversed(range(x.dim())))
        return lambda x: x.transpose(pair[0], pair[1])
    if kind == "permute":
        return lambda x: x.permute(*args["axes"])
    if kind in ("reshape", "view"):
        return lambda x: x.reshape(*args["shape"])
    if kind == "expand":
        return lambda x: x.expand(*args["shape"])
    if kind in ("contiguous", "cast"):
        return lambda x: x
    if kind in ("sum", "mean"):
        axes = args.get("axes")
        dims = tuple(axes) if axes is not None else None
        op = torch.sum if kind == "sum" else torch.mean
        return (lambda x: op(x, dim=dims, keepdim=bool(args.get("keepdims")))) if dims is not None \
            else (lambda x: op(x).reshape([1] * x.dim()) if args.get("keepdims") else op(x))
    return None


def reference(recorded: Trace, derived: Derived) -> tuple[dict[int, np.ndarray], dict[int, str]]:
    """float64 gradients by op id (torch autograd, op by op at the recorded values), and why
    the others have none (a kind without a torch rule here, on the way to them)."""
    import torch  # type: ignore[import-not-found, unused-ignore]

    ops = recorded.ops
    grads: dict[int, Any] = {}
    unknown: dict[int, str] = {}
    for i in recorded.outputs:
        if derived.seeded_by_loss_fn:
            if i not in derived.intermediates:
                unknown[i] = "loss_fn's gradient of an output without a record"
                continue
            seed = torch.from_numpy(derived.intermediates[i].astype(np.float64))
        else:
            seed = torch.ones(tuple(ops[i].shape), dtype=torch.float64)
        grads[i] = grads[i] + seed if i in grads else seed
    for op in reversed(ops):
        if op.kind in SOURCE_KINDS or op.id not in grads and op.id not in unknown:
            continue
        why = unknown.get(op.id)
        fn = None if why else _torch_fn(op.kind, op.args)
        parents = [ops[i] for i in op.inputs]
        if fn is None or any(p.payload is None for p in parents):
            for p in parents:
                unknown.setdefault(p.id, why or f"downstream {op.kind} op (op {op.id}) has no float64 rule here")
            continue
        leaves = [torch.tensor(values_of(np.asarray(p.payload), p.dtype), dtype=torch.float64,
                               requires_grad=p.dtype in _FLOAT) for p in parents]
        out = fn(*leaves)
        wrt = [x for x in leaves if x.requires_grad]
        got = torch.autograd.grad(out, wrt, grads[op.id], allow_unused=True) if wrt else ()
        it = iter(got)
        for p, x in zip(parents, leaves):
            if not x.requires_grad:
                continue
            g = next(it)
            if g is None:
                g = torch.zeros_like(x)
            grads[p.id] = grads[p.id] + g if p.id in grads else g
    return {i: g.numpy() for i, g in grads.items() if i not in unknown}, unknown


#: Normwise tolerance: a float32 chain whose matmul operands are rounded to bfloat16 (2^-9 each).
RTOL = 2.0 ** -5


def compare(got: np.ndarray, want: np.ndarray) -> str | None:
    """Why got is not want within RTOL of want's largest magnitude, or None."""
    if got.shape != want.shape:
        return f"shape {got.shape}, the float64 reference {want.shape}"
    err = np.abs(got.astype(np.float64) - want)
    bound = RTOL * float(np.max(np.abs(want), initial=0.0)) + 1e-30
    if not np.all(np.isfinite(got)) or float(np.max(err, initial=0.0)) > bound:
        index = tuple(int(i) for i in np.unravel_index(int(np.argmax(np.where(np.isfinite(err), err, np.inf))), err.shape))
        return (f"derived gradient differs from torch float64 autograd: at index {index} got "
                f"{float(got[index]):.6g}, want {float(want[index]):.6g} (bound {bound:.3g})")
    return None
