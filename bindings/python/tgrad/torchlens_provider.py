"""tgrad as a torchlens backend (extra ``tgrad[torchlens]``; docs/interop.md).

torchlens finds third-party backends through its ``torchlens.backends`` entry-point group; tgrad
declares ``tgrad = "tgrad.torchlens_provider:backend_spec"`` there (pyproject.toml). Discovery is
metadata-only and activation explicit, so a user opts in once per process::

    import torchlens as tl
    from torchlens.ecosystem import plugins
    plugins.activate("tgrad")                   # or tgrad.torchlens_provider.activate()
    tr = tl.trace(fn, x, backend="tgrad")        # fn: tgrad Tensors in, tgrad Tensors out
    tr.validate_forward_pass()                   # True / False, as torchlens' own Trace returns
    tr.validation_replay_status.message          # "... failed at relu_1_4 (relu): ..." names the first bad op
    tr.output_ops[0].out.numpy()                 # .out is a tgrad Tensor, as the framework's tensor
    tl.validate(fn, x, scope="forward", backend="tgrad")   # True / False

Derived gradients: ``tl.trace(fn, x, backend="tgrad", grad_options=GradOptions(intermediate_grads=True))``
records each op's gradient of the loss (tgrad's engine, `tgrad.torchlens_grads`) as
``tr.intermediate_derived_grads`` / ``tr[label].derived_grad``, inputs' as ``tr.derived_grads``;
validation checks them against torch float64 autograd.

Forgetting the activation: torchlens answers ``tl.trace(..., backend="tgrad")`` with its own
``UnknownBackendError`` ("Unknown backend 'tgrad'. Registered backends: ...") and, without
``backend=``, takes the torch path ("Unsupported model type for capture"). Both messages are
torchlens' (raised before any tgrad code runs, so tgrad cannot add to them); the remedy is
``plugins.activate("tgrad")``.

Capture is `tgrad.trace`: ``fn`` runs once building tgrad's lazy graph, every op it makes is
recorded, the outputs are realized once, and each op's output is read (payloads are bf16 arrays,
``ml_dtypes.bfloat16``). Validation replays every op through tgrad's oracle (the ``conformance``
package) bit for bit.

What the public protocol allows, and where it stops: a provider hands torchlens a `BackendSpec`
(``register_backend_spec``), whose ``capture_trace`` result ``tl.trace`` returns as is. torchlens'
own ``Trace``/``Layer``/``Op`` objects are filled only by its private capture machinery (the event
stream of ``torchlens.ir.capture_events``, ``torchlens.postprocess._materialize`` and
``torchlens.backends._finalize``; its built-in tinygrad backend uses them), so this provider
returns a `LensTrace`: torchlens' read surface (labels, ``trace[label].out``, parents and
children, ``output_ops``, ``validate_forward_pass``, ``validation_replay_status``) over a
`tgrad.Trace`, which stays the full-featured path (``LensTrace.tgrad_trace``: JSON, plans,
routes, views). Refusals are torchlens' typed errors with torchlens' codes
(``backend_unsupported``; ``backend_mismatch`` comes from torchlens itself when no tgrad Tensor is
given), each also the tgrad error class of the same fault, so either ``except`` catches it.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

# An optional dependency (extra tgrad[torchlens]): typed where installed, missing where not.
from torchlens.backends import (  # type: ignore[import-not-found, unused-ignore]
    BackendCapabilities,
    BackendSpec,
    BackendUnsupportedError,
    SerializationPolicy,
    get_backend_spec,
    register_backend_spec,
)
from torchlens.validation import (  # type: ignore[import-not-found, unused-ignore]
    ValidationFailure,
    ValidationReplayStatus,
)
from torchlens.data_classes.derived_grad import (  # type: ignore[import-not-found, unused-ignore]
    DerivedGradAccessor,
    DerivedGradRecord,
    IntermediateDerivedGradAccessor,
    IntermediateDerivedGradRecord,
)
from torchlens.ir.refs import DtypeRef  # type: ignore[import-not-found, unused-ignore]
from torchlens.validation import diagnostics as _diagnostics  # type: ignore[import-not-found, unused-ignore]

from . import errors
from .nn.module import Module
from .tensor import Tensor
from .trace import SOURCE_KINDS, OpResult, Trace, TraceOp, Validation
from .trace import trace as tgrad_trace
from .torchlens_grads import GradOptions, Derived, derive
from . import torchlens_grads as _grads

__all__ = ["NAME", "CAPABILITY_NOTES", "GradOptions", "LensOp", "LensTrace", "TorchlensNoInputError",
           "TorchlensNoOutputError", "TorchlensOptionUnsupportedError", "activate", "backend_spec",
           "can_handle", "capture_trace", "validate_entry", "validate_trace"]

#: The backend name: ``tl.trace(..., backend="tgrad")``.
NAME = "tgrad"

#: torchlens' capability flags for tgrad, with why each is what it is (docs/interop.md's table).
CAPABILITY_NOTES: dict[str, tuple[Any, str]] = {
    "backward_capture": (False, "no torch-style backward capture (save_grads); derived gradients instead"),
    "validation_replay": (True, "every op replayed bit for bit through tgrad's oracle"),
    "fastlog": (False, "no sparse tl.record capture: a tgrad trace records every op"),
    "interventions": (False, "tgrad tensors are immutable values; no live edits"),
    "rng_replay": (False, "tgrad has no random numbers"),
    "payload_materialization": (False, "traces are not saved as torchlens bundles "
                                       "(Trace.to_json(payloads=True) keeps tgrad's)"),
    "streaming": (False, "payloads are read once, after the single realization"),
    "structure_only_capture": (False, "capture realizes the graph: payloads are always read"),
    "intermediate_derived_grads": (True, "grad_options=GradOptions(intermediate_grads=True): each op's "
                                         "gradient from tgrad's engine (tgrad_grad), checked by validation"),
    "input_container_structure": ("none", "inputs are a Tensor or a flat tuple/list of them"),
    "output_container_structure": ("none", "outputs: a Tensor, or nested tuples/lists/dicts"),
    "module_identity_modes": (("function_root",), "fn is a plain callable; no module tree"),
    "save_levels": ((), "no torchlens bundle format; tgrad.Trace.to_json is the saved form"),
    "trace_options": (("grad_options",), "grad_options=GradOptions(...): derived gradients"),
}

# tl.trace passes every public keyword; these are their values when the caller gave none (the
# _MAY_BE_MISSING ones: torchlens' MISSING sentinel, or None).
_DEFAULTS: dict[str, Any] = {
    "input_kwargs": None, "capture": None, "save": None, "intervene": None, "halt": None,
    "lookback": 0, "lookback_payload_policy": "metadata_only", "storage": None, "streaming": None,
    "echo": None, "episode": None, "random_seed": None,
}
_MAY_BE_MISSING = frozenset({"grad_transform", "save_mode", "reconstruction_ready", "profile",
                             "recipes", "grouping", "jax_static_argnums",
                             "chunk_size", "chunk_paths"})


# ---- refusals ---------------------------------------------------------------------------------
def _refusal_class(name: str, tgrad_code: str, doc: str) -> Any:
    """An error class that is torchlens' BackendUnsupportedError (its ``code``,
    ``backend_unsupported``) and the tgrad error of the same fault, so either ``except`` works."""
    bases = (BackendUnsupportedError, errors.by_code[tgrad_code])
    return type(name, bases, {"__module__": __name__, "__qualname__": name, "__doc__": doc})


TorchlensOptionUnsupportedError = _refusal_class(
    "TorchlensOptionUnsupportedError", "trace_option_unsupported",
    "A torchlens option tgrad does not implement (also tgrad's TraceOptionUnsupportedError).")
TorchlensNoOutputError = _refusal_class(
    "TorchlensNoOutputError", "trace_no_output",
    "fn returned no tgrad Tensor (also tgrad's TraceNoOutputError).")
TorchlensNoInputError = _refusal_class(
    "TorchlensNoInputError", "trace_no_input",
    "No tgrad Tensor among the inputs (also tgrad's TraceNoInputError). torchlens itself raises "
    "backend_mismatch first when it resolves the backend; this is for direct calls.")


def _refuse(cls: Any, message: str, remedy: str, tgrad_code: str) -> Exception:
    error: Exception = cls(f"backend 'tgrad': {message}", remedy=remedy, backend=NAME,
                           tgrad_code=tgrad_code)
    return error


def _is_missing(value: Any) -> bool:
    """torchlens' sentinel for a keyword the caller did not give (torchlens._deprecations is
    private, so it is known by its type's name)."""
    return type(value).__name__ == "MissingType"


def _check_options(options: Mapping[str, Any]) -> None:
    """Refuse, before fn runs, any torchlens option given a value other than its default."""
    for name, value in options.items():
        if name in _MAY_BE_MISSING:
            given = not (_is_missing(value) or value is None)
        elif name in _DEFAULTS:
            given = not _is_default(value, _DEFAULTS[name])
        else:
            given = True
        if given:
            code = "trace_option_unsupported"
            if name == "input_kwargs":
                raise _refuse(TorchlensOptionUnsupportedError,
                              "keyword inputs are not supported: fn takes tgrad Tensors positionally",
                              "pass the tensors in input_args", code)
            if name == "save" and isinstance(value, str) and value == "all":
                continue  # what the backend always does
            raise _refuse(TorchlensOptionUnsupportedError,
                          f"option {name}={_short(value)} is not supported (tgrad traces are "
                          "forward-only, record every op and save every payload)",
                          f"omit {name}, or use tgrad.trace for tgrad's own options", code)


def _is_default(value: Any, default: Any) -> bool:
    """value is the default: the same object, or an equal int or str (compared only then, so an
    array or an object with an odd ``==`` is simply not the default)."""
    if value is default:
        return True
    plain = (int, str)
    return (type(value) in plain and type(default) in plain and type(value) is type(default)
            and bool(value == default))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _inputs(input_args: Any) -> tuple[Any, ...]:
    if isinstance(input_args, (tuple, list)):
        return tuple(input_args)
    return (input_args,)


def can_handle(model: object, input_args: object, input_kwargs: dict[Any, Any] | None) -> bool:
    """torchlens' detector: fn is callable and a tgrad Tensor is among the inputs."""
    del input_kwargs
    return callable(model) and any(isinstance(t, Tensor) for t in _inputs(input_args))


# ---- the trace torchlens gets -------------------------------------------------------------------
class LensOp:
    """One recorded op in torchlens' terms: ``label`` (``matmul_1_2``: kind, its count among ops
    of that kind, its number among computed ops; sources are ``input_1``, ``captured_1``,
    ``constant_1``), ``address`` (a captured tensor's name in fn: ``fc1.weight``), ``layer_type``, ``parents``/``children`` (labels), ``shape``, ``dtype``,
    ``out`` (the op's output as a tgrad Tensor, the framework's tensor as torchlens' tutorial reads
    it: ``out.numpy()``; a new Tensor of the recorded bits at each access; None for an op that was
    never realized), ``payload`` (the recorded bits themselves, an ``ml_dtypes.bfloat16`` array
    view) and ``op`` (the `tgrad.trace.TraceOp`)."""

    def __init__(self, op: TraceOp, label: str, parents: tuple[str, ...]) -> None:
        self.op = op
        self.label = label
        self.parents = parents
        self.children: tuple[str, ...] = ()
        self.is_output = False
        #: For a captured tensor that fn reaches by name (an attribute of fn's object, a variable
        #: of its closure: ``fc1.weight``), that name; else None.
        self.address: str | None = None
        self.grad_record: Any = None

    layer_label = property(lambda self: self.label)
    layer_type = property(lambda self: self.op.kind)
    func_name = property(lambda self: self.op.kind)
    shape = property(lambda self: tuple(self.op.shape))
    dtype = property(lambda self: "bfloat16")
    route = property(lambda self: self.op.route)
    is_input = property(lambda self: self.op.kind in SOURCE_KINDS)

    @property
    def has_saved_activation(self) -> bool:
        return self.op.payload is not None

    @property
    def payload(self) -> np.ndarray | None:
        """The recorded output bits as an ``ml_dtypes.bfloat16`` array (a view: writing to it
        changes the record), or None."""
        payload = self.op.payload
        return None if payload is None else payload.view(ml_dtypes.bfloat16)

    @property
    def out(self) -> Tensor | None:
        """The op's output as a tgrad Tensor (torchlens' ``.out`` is the framework's tensor), or
        None for an op that never ran."""
        payload = self.op.payload
        return None if payload is None else Tensor.from_bf16_bits(np.ascontiguousarray(payload, dtype=np.uint16))

    @property
    def derived_grad(self) -> np.ndarray | None:
        """This op's derived gradient (float32, grad_options=GradOptions(intermediate_grads=True)),
        or None."""
        return self.grad_record.grad if self.grad_record is not None else None

    def __repr__(self) -> str:
        return f"LensOp({self.label}: {self.layer_type} {list(self.shape)} <- {list(self.parents)})"


def _labels(ops: Sequence[TraceOp]) -> list[str]:
    counts: dict[str, int] = {}
    computed = 0
    labels = []
    for op in ops:
        if op.kind in SOURCE_KINDS:
            stem = "input" if op.origin == "argument" else op.origin if op.kind == "input" else "constant"
            counts[stem] = counts.get(stem, 0) + 1
            labels.append(f"{stem}_{counts[stem]}")
        else:
            computed += 1
            counts[op.kind] = counts.get(op.kind, 0) + 1
            labels.append(f"{op.kind}_{counts[op.kind]}_{computed}")
    return labels


# ---- naming captured tensors: what fn reaches through its object or its closure -----------------
_WALK_DEPTH = 4
_WALK_NODES = 10_000
_View = tuple[int, tuple[int, ...], tuple[int, ...], int]


def _view_key(tensor: Tensor) -> _View:
    return tensor.buffer_id, tuple(tensor.shape), tuple(tensor.strides), tensor.offset


def _roots(model: Any) -> list[tuple[str, Any]]:
    """Where fn's captured tensors can be named from: a bound method's object, a function's
    closure variables and the globals its code names, a callable object's attributes."""
    owner = getattr(model, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType):
        return [("", owner)]
    if not isinstance(model, types.FunctionType):
        return [("", model)]
    code = model.__code__
    found = []
    for name, cell in zip(code.co_freevars, model.__closure__ or ()):
        try:
            found.append((name, cell.cell_contents))
        except ValueError:  # an empty cell: a variable not yet assigned
            continue
    found.extend((name, model.__globals__[name]) for name in code.co_names if name in model.__globals__)
    return found


#: Module's registries: walked by their entries' names ("fc1.weight"), not as attributes.
_MODULE_REGISTRIES = ("_parameters", "_buffers", "_modules")


def _addresses(model: Any) -> dict[_View, str]:
    """Each tensor fn reaches by name, by its view (buffer, shape, strides, offset), breadth
    first (the shortest name wins), within a bounded walk of plain attributes and containers."""
    named: dict[_View, str] = {}
    queue: list[tuple[str, Any, int]] = [(a, v, 0) for a, v in _roots(model)]
    seen: set[int] = set()
    while queue and len(seen) < _WALK_NODES:
        address, value, depth = queue.pop(0)
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, Tensor):
            if value._handle:
                named.setdefault(_view_key(value), address)
            continue
        if depth >= _WALK_DEPTH:
            continue
        if isinstance(value, Mapping):
            items = [(str(k), v) for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            items = [(str(i), v) for i, v in enumerate(value)]
        elif isinstance(value, Module):  # its parameters, buffers and children by their names
            items = [*value._parameters.items(), *value._buffers.items(), *value._modules.items(),
                     *((k, v) for k, v in vars(value).items() if k not in _MODULE_REGISTRIES)]
        elif hasattr(value, "__dict__") and not isinstance(value, (type, types.ModuleType)) \
                and type(value).__module__ != "builtins":
            items = list(vars(value).items())
        else:
            continue
        queue.extend((f"{address}.{k}" if address else k, v, depth + 1) for k, v in items)
    return named


class LensTrace:
    """What ``tl.trace(fn, x, backend="tgrad")`` returns: torchlens' read surface over a
    `tgrad.Trace` (``tgrad_trace``). Index by label or position (``tr["relu_1_4"]``,
    ``tr[-1]``); iterate for every op in creation order."""

    backend = NAME

    def __init__(self, recorded: Trace, addresses: Mapping[_View, str] | None = None,
                 derived: Derived | None = None) -> None:
        self.tgrad_trace = recorded
        #: tgrad's derived gradients (grad_options=), by op id; None without grad_options.
        self.derived = derived
        labels = _labels(recorded.ops)
        self.ops: tuple[LensOp, ...] = tuple(
            LensOp(op, label, tuple(labels[i] for i in op.inputs))
            for op, label in zip(recorded.ops, labels))
        self._by_label = {op.label: op for op in self.ops}
        children: dict[str, list[str]] = {}
        for op in self.ops:
            for parent in op.parents:
                children.setdefault(parent, []).append(op.label)
        for op in self.ops:
            op.children = tuple(children.get(op.label, ()))
        for i in recorded.outputs:
            self.ops[i].is_output = True
        for op in self.ops:
            if op.op.kind == "input" and op.op.origin == "captured" and addresses:
                key = (op.op.buffer_id, tuple(op.op.shape), tuple(op.op.strides), op.op.offset)
                op.address = addresses.get(key)
        self._validation_replay_status: Any = None
        self.intermediate_derived_grads, self.derived_grads = _derived_records(self)

    @property
    def layers(self) -> tuple[LensOp, ...]:
        return self.ops

    @property
    def layer_labels(self) -> list[str]:
        return [op.label for op in self.ops]

    @property
    def input_layers(self) -> list[str]:
        return [op.label for op in self.ops if op.op.kind == "input" and op.op.origin == "argument"]

    @property
    def output_layers(self) -> list[str]:
        return [self.ops[i].label for i in self.tgrad_trace.outputs]

    @property
    def output_ops(self) -> list[LensOp]:
        return [self.ops[i] for i in self.tgrad_trace.outputs]

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[LensOp]:
        return iter(self.ops)

    def __getitem__(self, key: int | str) -> LensOp:
        if isinstance(key, str):
            found = self._by_label.get(key)
            if found is None:
                raise errors.InvalidArgumentError(
                    f"LensTrace: no op labelled {key[:60]!r} (labels: {', '.join(self._by_label)})")
            return found
        if isinstance(key, bool) or not isinstance(key, int) or not -len(self.ops) <= key < len(self.ops):
            raise errors.InvalidArgumentError(
                f"LensTrace: index {_short(key)} is not a label or a position in 0..{len(self.ops) - 1}")
        return self.ops[key]

    def __repr__(self) -> str:
        return f"LensTrace(backend='tgrad', {len(self.ops)} ops: {', '.join(self.layer_labels)})"

    @property
    def validation_replay_status(self) -> Any:
        """The last validation's status, else torchlens' "available" status."""
        if self._validation_replay_status is not None:
            return self._validation_replay_status
        return ValidationReplayStatus.available_live(backend=NAME)

    def validate_forward_pass(self, ground_truth_output_tensors: Any = None, verbose: bool = False,
                              validate_metadata: bool = True) -> Any:
        """Replay every op through tgrad's oracle. As torchlens' own ``Trace`` does: True or
        False for a replay that completed (passed or failed), the ValidationReplayStatus itself
        otherwise (an op not replayed: "unverified"); either way the status is kept on
        ``validation_replay_status`` (``message`` names the first offending op). Ground truths,
        when given (tgrad Tensors, bf16 arrays, torch bfloat16 tensors), must equal the recorded
        outputs bit for bit."""
        status = self.validate(ground_truth_output_tensors, verbose, validate_metadata)
        return status.passed if status.state in ("passed", "failed") else status

    def validate(self, ground_truth_output_tensors: Any = None, verbose: bool = False,
                 validate_metadata: bool = True) -> Any:
        """validate_forward_pass, returning the ValidationReplayStatus itself in every case."""
        return validate_trace(self, ground_truth_output_tensors=ground_truth_output_tensors,
                              verbose=verbose, validate_metadata=validate_metadata)


def _derived_records(lens: LensTrace) -> tuple[Any, Any]:
    """torchlens' accessors of the derived gradients: op records by label, input records by path."""
    derived = lens.derived
    if derived is None:
        return IntermediateDerivedGradAccessor(), DerivedGradAccessor()
    provenance = {"backend": NAME, "kind": "intermediate_derived_gradient", "mechanism": "tgrad_grad",
                  "grad_dtype": "float32", "status": "exact",
                  "loss": "loss_fn" if derived.seeded_by_loss_fn else "sum of outputs"}
    records = {}
    for i, grad in derived.intermediates.items():
        op = lens.ops[i]
        op.grad_record = records[op.label] = IntermediateDerivedGradRecord(
            op_label=op.label, layer_label=op.label, aval=f"float32{list(grad.shape)}",
            dtype_ref=DtypeRef(backend=NAME, name="float32"), grad=grad, provenance=dict(provenance))
    inputs = {}
    for i, (argnum, grad) in derived.inputs.items():
        path = f"inputs.{argnum}"
        inputs[path] = DerivedGradRecord(
            path=path, source="inputs", argnum=argnum, input_argnum=argnum, aval=f"float32{list(grad.shape)}",
            dtype_ref=DtypeRef(backend=NAME, name="float32"), grad=grad,
            provenance={**provenance, "kind": "derived_gradient"})
    return IntermediateDerivedGradAccessor(records), DerivedGradAccessor(inputs)


def _grad_checks(trace: LensTrace) -> list[dict[str, Any]]:
    """One decision row per derived gradient: checked against torch float64 autograd."""
    derived = trace.derived
    if derived is None:
        return []
    want, unknown = _grads.reference(trace.tgrad_trace, derived)
    rows = []
    items = [(i, g) for i, g in derived.intermediates.items()] + [(i, g) for i, (_n, g) in derived.inputs.items()]
    for i, grad in items:
        op = trace.ops[i]
        if derived.seeded_by_loss_fn and op.is_output:
            state, detail = "skipped", "an output's gradient seeds the check (loss_fn is not replayed)"
        elif i not in want:
            state, detail = "skipped", unknown.get(i, "no float64 reference")
        else:
            why = _grads.compare(np.asarray(grad), want[i])
            state, detail = ("failed", why) if why else ("passed", "within the bound of torch float64 autograd")
        rows.append({"label": op.label, "kind": op.layer_type, "state": state, "detail": detail,
                     "check": "derived_grad"})
    return rows


# ---- the BackendSpec's entries ----------------------------------------------------------------
def capture_trace(model: Any = None, input_args: Any = None, input_kwargs: dict[Any, Any] | None = None,
                  **options: Any) -> LensTrace:
    """``tl.trace``'s entry: refuse what tgrad cannot honour, then `tgrad.trace` fn once."""
    grad_options = options.pop("grad_options", None)
    if _is_missing(grad_options):
        grad_options = None
    _check_options({"input_kwargs": input_kwargs or None, **options})
    if grad_options is not None:
        _grads.options_of(grad_options)  # a wrong type is refused before fn runs
    args = _inputs(input_args)
    if not callable(model):
        raise _refuse(TorchlensOptionUnsupportedError, f"model is a {type(model).__name__}, not a callable",
                      "pass the function that takes and returns tgrad Tensors", "invalid_argument")
    if not any(isinstance(t, Tensor) for t in args):
        raise _refuse(TorchlensNoInputError, "no tgrad Tensor among the inputs",
                      "pass tgrad Tensors in input_args", "trace_no_input")
    try:
        recorded = tgrad_trace(model, *args)
    except errors.TraceNoOutputError as exc:
        raise _refuse(TorchlensNoOutputError, str(exc), "return a tgrad Tensor (or a tuple, list "
                      "or dict of them) from fn", "trace_no_output") from None
    derived = None if grad_options is None else derive(model, args, recorded, grad_options)
    return LensTrace(recorded, _addresses(model), derived)


def _truth_bits(truth: Any) -> np.ndarray:
    """A ground truth as an array: a tgrad Tensor's values; a bf16 DLPack producer (a torch
    bfloat16 tensor) read through tgrad.from_dlpack; anything else through numpy (only bf16
    arrays can then equal an output)."""
    if isinstance(truth, Tensor):
        return truth.numpy()
    if not isinstance(truth, np.ndarray) and hasattr(truth, "__dlpack__") \
            and "bfloat16" in str(getattr(truth, "dtype", "")):
        from . import from_dlpack

        return from_dlpack(truth).numpy()
    return np.asarray(truth)


def _ground_truth_mismatch(trace: LensTrace, truths: Any) -> str | None:
    """Why the given outputs differ from the recorded ones, or None when they agree."""
    given = list(truths) if isinstance(truths, (tuple, list)) else [truths]
    outputs = trace.output_ops
    if len(given) != len(outputs):
        return f"{len(given)} ground-truth outputs for {len(outputs)} recorded"
    for op, truth in zip(outputs, given):
        try:
            bits = _truth_bits(truth)
        except (TypeError, ValueError, RuntimeError, errors.TgradError) as exc:
            return f"ground truth for output {op.label} is not an array ({type(exc).__name__})"
        if bits.dtype != np.dtype(ml_dtypes.bfloat16) or op.payload is None or bits.shape != op.shape \
                or not np.array_equal(bits.view(np.uint16), op.payload.view(np.uint16)):
            return f"ground truth differs from output {op.label}"
    return None


def _status(trace: LensTrace, checked: Validation) -> Any:
    """torchlens' ValidationReplayStatus for tgrad's Validation, the first failure named."""
    labels = trace.layer_labels
    decisions = [{"label": labels[r.op], "kind": r.kind, "state": r.state, "detail": r.detail}
                 for r in checked.results]
    count = {s: sum(1 for r in checked.results if r.state == s) for s in ("passed", "failed", "skipped")}
    failed = [r for r in checked.results if r.state == "failed"]
    if failed:
        first = failed[0]
        status = ValidationReplayStatus.result(
            passed=False, backend=NAME, source="live", replayed_node_count=count["passed"],
            failed_node_count=count["failed"], decisions=decisions)
        return dataclasses.replace(status, message=(
            f"Replay validation failed at {labels[first.op]} ({first.kind}): {first.detail} "
            f"[{count['failed']} of {len(checked.results)} ops failed]"))
    if count["skipped"]:
        return ValidationReplayStatus.unverified(
            backend=NAME, source="live", reason="tgrad_replay_skipped",
            message=f"{count['skipped']} op(s) not replayed (no payload, or a route without a "
                    f"bit-exact promise); {count['passed']} replayed bit-exact",
            replayed_node_count=count["passed"], unverified_node_count=count["skipped"],
            decisions=decisions)
    status = ValidationReplayStatus.result(passed=True, backend=NAME, source="live",
                                           replayed_node_count=count["passed"], decisions=decisions)
    return dataclasses.replace(status, message=f"Replay validation passed: {checked.message}")


def _failure(trace: LensTrace, result: OpResult | None, message: str) -> Any:
    if result is None:
        return ValidationFailure(check="ground_truth", message=message)
    op = trace.ops[result.op]
    return ValidationFailure(check="forward_replay", op_label=op.label, func_name=op.layer_type,
                             message=result.detail, saved_shape=op.shape, saved_dtype="bfloat16")


def validate_trace(trace: Any, *_args: Any, ground_truth_output_tensors: Any = None,
                   verbose: bool = False, validate_metadata: bool = True, **_kwargs: Any) -> Any:
    """Replay a LensTrace through tgrad's oracle; its ValidationReplayStatus. The first failure
    is also recorded where ``torchlens.validation.last_validation_failure()`` reads it."""
    del validate_metadata  # tgrad's replay checks every op's shape and bits already
    if not isinstance(trace, LensTrace):
        raise _refuse(TorchlensOptionUnsupportedError, f"cannot validate a {type(trace).__name__}",
                      "validate the trace tl.trace(..., backend='tgrad') returned", "invalid_argument")
    _diagnostics.reset_validation_failure(trace)
    checked = trace.tgrad_trace.validate()
    status = _status(trace, checked)
    grad_rows = _grad_checks(trace)
    grad_failed = [r for r in grad_rows if r["state"] == "failed"]
    if grad_rows:
        status = dataclasses.replace(status, decisions=[*status.decisions, *grad_rows])
    if grad_rows and not grad_failed and status.message:
        ok = sum(1 for r in grad_rows if r["state"] == "passed")
        status = dataclasses.replace(status, message=(
            f"{status.message}; derived gradients: {ok} of {len(grad_rows)} within the bound of torch "
            "float64 autograd"))
    if grad_failed and status.state != "failed":
        row0 = grad_failed[0]
        status = dataclasses.replace(status, state="failed", message=(
            f"Derived gradient validation failed at {row0['label']} ({row0['kind']}): {row0['detail']} "
            f"[{len(grad_failed)} of {len(grad_rows)} gradients failed]"))
    mismatch = None
    if ground_truth_output_tensors is not None:
        mismatch = _ground_truth_mismatch(trace, ground_truth_output_tensors)
        if mismatch is not None and status.state != "failed":
            status = dataclasses.replace(status, state="failed",
                                         message=f"Replay validation failed: {mismatch}")
    if status.state == "failed":
        first = next((r for r in checked.results if r.state == "failed"), None)
        if first is None and grad_failed and mismatch is None:
            row = grad_failed[0]
            failure = ValidationFailure(check="derived_grad", op_label=row["label"], func_name=row["kind"],
                                        message=row["detail"])
        else:
            failure = _failure(trace, first, mismatch or "")
        _diagnostics.record_validation_failure(trace, failure)
        if verbose:
            print(status.message)
    trace._validation_replay_status = status
    return status


def validate_entry(model: Any, input_args: Any, input_kwargs: dict[Any, Any] | None = None, *,
                   random_seed: int | None = None, verbose: bool = False,
                   validate_metadata: bool = True, **save_options: Any) -> bool:
    """``tl.validate(fn, x, scope="forward", backend="tgrad")``: capture, then replay; a bool."""
    _check_options({"input_kwargs": input_kwargs or None, "random_seed": random_seed, **save_options})
    lens = capture_trace(model, input_args)
    status = validate_trace(lens, verbose=verbose, validate_metadata=validate_metadata)
    return bool(status.state == "passed")


def backend_spec() -> Any:
    """The ``torchlens.backends`` entry point: a zero-argument factory of tgrad's BackendSpec."""
    caps = {name: value for name, (value, _why) in CAPABILITY_NOTES.items()}
    return BackendSpec(
        name=NAME, can_handle=can_handle, capture_trace=capture_trace,
        validate_entry=validate_entry, validate_trace=validate_trace,
        capabilities=BackendCapabilities(**caps),
        serialization_policy=SerializationPolicy(runtime_name=NAME),
        priority=35)


def activate() -> Any:
    """Register the backend without the entry point (a source tree, no installed distribution):
    what ``torchlens.ecosystem.plugins.activate("tgrad")`` does for an installed tgrad. Returns
    the registered BackendSpec; activating again replaces it."""
    register_backend_spec(backend_spec(), replace=True)
    return get_backend_spec(NAME)
