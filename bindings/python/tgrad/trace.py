"""Trace and replay validation: record what a function did with lazy tensors, then prove it.

``tgrad.trace(fn, *tensors, **options)`` calls ``fn(*tensors)``, realizes the Tensors it returns
once, and returns a `Trace`: every op made while ``fn`` ran (matmul; the elementwise ops under
their registry names, "add", "gelu_tanh", ...; transpose, permute, expand, slice, select, reshape,
view, contiguous; ``constant`` for tensors made from host data inside ``fn``, numbers given to an
elementwise op among them; ``input`` for the given tensors and for tensors ``fn`` captured from
outside), in creation order, each with its input op ids, shape, view (strides, offset), buffer id,
route and payload (its output bits, read after the realization). ``trace.validate()`` replays
every op through the oracle: a matmul through ``tgrad.conformance.oracle.matmul_bits`` and an
elementwise op through ``tgrad.conformance.elementwise.elementwise_bits`` on its recorded input
payloads, a view op through numpy on its input's payload; each compared bit for bit. So a wrong
kernel output is pinned to the op that produced it (fused or not: the trace holds a handle on
every intermediate, so each op's result is stored and read).

>>> import numpy as np, tgrad
>>> a = tgrad.Tensor.from_numpy(np.ones((2, 3), np.float32))
>>> tr = tgrad.trace(lambda x: x @ x.T, a)
>>> [op.kind for op in tr], tr.validate().state
(['input', 'transpose', 'matmul'], 'passed')

Options (anything else is refused with TraceOptionUnsupportedError before ``fn`` runs):
``device`` ("cpu", the only backend the runtime dispatches to today), ``cpu_isa`` (a CPU variant
to realize with, e.g. "portable", or "auto"; restored afterwards; by default the selection in
force, recorded as the forced variant's name or "auto") and ``threads`` (worker threads for the
realization; restored afterwards).

Ops are recorded through a hook in tgrad.tensor (a context variable holding the active recorder),
so only tensors made in the calling thread's context while ``fn`` runs are seen. The JSON schema of
`Trace.to_json` is documented in docs/observability.md.
"""

from __future__ import annotations

import base64
import hashlib
import json
import functools
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _buildable, errors
from . import trace_kinds as _trace_kinds
from ._ffi import lib
from .tensor import _RECORDER, Tensor

__all__ = ["OpResult", "Trace", "TraceOp", "Validation", "trace", "SCHEMA"]

#: The "schema" field of Trace.to_json(); bumped on any incompatible change of the layout.
SCHEMA = "tgrad.trace/1"

#: Kinds that are always zero-copy (docs/views.md): validate() checks they share their input's buffer.
ZERO_COPY_KINDS = frozenset({"transpose", "permute", "expand", "slice", "select", "view"})
#: Kinds that are not replayed: their payload is the data the trace starts from.
SOURCE_KINDS = frozenset({"input", "constant"})
#: Kinds replayed as a numpy view (or copy) of their one input.
VIEW_KINDS = ZERO_COPY_KINDS | {"reshape", "contiguous"}
#: How many inputs each kind that is not an elementwise op replays from (those: their arity).
_INPUT_COUNTS = {"matmul": 2, **{kind: 1 for kind in VIEW_KINDS | _trace_kinds.KINDS}, **_trace_kinds.INPUT_COUNTS}
OPTIONS = ("device", "cpu_isa", "threads")
_MAX_DIMS = int(lib.TGRAD_MAX_DIMS)


# ---- records --------------------------------------------------------------------------------------
@dataclass
class TraceOp:
    """One recorded op. ``payload`` is its output as bit patterns (uint16 for bfloat16, uint32 for
    float32 and int32: ``dtype``; shape ``shape``), or None when the op was not on the path to an
    output (it never ran, so it was not read)."""

    id: int
    kind: str
    inputs: tuple[int, ...]
    args: dict[str, Any]
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    offset: int = 0
    buffer_id: int = 0
    route: str = ""
    origin: str = "fn"  # "argument" / "captured" for inputs, "fn" for ops made inside fn
    payload: np.ndarray | None = None
    dtype: str = "bfloat16"

    def to_dict(self, payloads: bool = False) -> dict[str, Any]:
        record: dict[str, Any] = {
            "id": self.id, "kind": self.kind, "inputs": list(self.inputs), "args": self.args,
            "shape": list(self.shape), "strides": list(self.strides), "offset": self.offset,
            "buffer_id": self.buffer_id, "route": self.route, "origin": self.origin, "payload": None,
        }
        if self.payload is not None:
            raw = np.ascontiguousarray(self.payload, dtype=_trace_kinds.BITS[self.dtype]).tobytes()
            record["payload"] = {"dtype": self.dtype, "bytes": len(raw),
                                 "sha256": hashlib.sha256(raw).hexdigest()}
            if payloads:
                record["payload"]["data"] = base64.b64encode(raw).decode("ascii")
        return record

    @classmethod
    def from_dict(cls, record: Any, *, where: str = "TraceOp.from_dict") -> TraceOp:
        """The op of one record of Trace.to_dict()["ops"]; a missing field, a field of the wrong
        type, an input that is not an earlier op or a payload that does not fit the shape raises
        InvalidArgumentError naming it (`where` says which record)."""
        if not isinstance(record, dict):
            raise _refuse(where, f"is a JSON {type(record).__name__}, not an object")
        op_id = _field(record, "id", "an integer", where)
        kind = _field(record, "kind", "a string", where)
        if kind not in known_kinds():
            raise _refuse(where, f"kind {kind[:40]!r} is not an op tgrad records "
                                 f"({', '.join(sorted(known_kinds()))})")
        shape = _field(record, "shape", "a list of non-negative integers", where)
        # Checked before any numpy call: the payload is read into an array of this shape.
        if len(shape) > _MAX_DIMS:
            raise _refuse(where, f"shape has {len(shape)} axes; a tgrad tensor has at most {_MAX_DIMS}")
        why = _buildable.problem(shape, _trace_kinds.BITS[_stored_dtype(record, where)].itemsize)
        if why is not None:
            raise _refuse(where, f"shape is not one numpy can build: {why}")
        inputs = _field(record, "inputs", "a list of integers", where)
        for i in inputs:
            if not 0 <= i < op_id:
                raise _refuse(where, f"input {i} is not an earlier op (ops are stored in creation order)")
        return cls(id=op_id, kind=kind, inputs=tuple(inputs),
                   args=_field(record, "args", "an object", where), shape=tuple(shape),
                   strides=tuple(_field(record, "strides", "a list of integers", where)),
                   offset=_field(record, "offset", "an integer", where),
                   buffer_id=_field(record, "buffer_id", "an integer", where),
                   route=_field(record, "route", "a string", where),
                   origin=_field(record, "origin", "a string", where, "fn"),
                   payload=_stored_payload(record, shape, where), dtype=_stored_dtype(record, where))


# ---- reading stored traces: every field checked, so a bad document is refused by name -----------
def _stored_dtype(record: Mapping[str, Any], where: str) -> str:
    """A record's payload dtype ("bfloat16" when the record predates dtypes or has no payload)."""
    stored = _field(record, "payload", "an object or null", where, None)
    dtype = "bfloat16" if stored is None else _field(stored, "dtype", "a string", where, "bfloat16")
    if dtype not in _trace_kinds.BITS:
        raise _refuse(where, f"payload dtype {dtype[:40]!r} is not one of {', '.join(_trace_kinds.BITS)}")
    return str(dtype)


def _stored_payload(record: Mapping[str, Any], shape: list[int], where: str) -> np.ndarray | None:
    """A record's payload bits (uint16 or uint32 of `shape`), or None when it holds only the digest."""
    stored = _field(record, "payload", "an object or null", where, None)
    if stored is None or "data" not in stored:
        return None
    bits = _trace_kinds.BITS[_stored_dtype(record, where)]
    data = _field(stored, "data", "a string", where)
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        raise _refuse(where, "payload data is not base64") from None
    numel = 1
    for extent in shape:
        numel *= extent
    if len(raw) != bits.itemsize * numel:
        raise _refuse(where, f"payload data of {len(raw)} bytes does not hold {bits.itemsize}-byte "
                             f"elements of shape {shape}")
    values: np.ndarray = np.frombuffer(raw, dtype=bits).astype(bits.newbyteorder("=")).reshape(shape)
    return values


_REQUIRED: Any = object()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: The types a stored field may have, by the words the refusal uses.
_FIELD_TYPES: dict[str, Callable[[Any], bool]] = {
    "an integer": _is_int,
    "a string": lambda v: isinstance(v, str),
    "an object": lambda v: isinstance(v, dict),
    "an object or null": lambda v: v is None or isinstance(v, dict),
    "a list": lambda v: isinstance(v, list),
    "a list of integers": lambda v: isinstance(v, list) and all(_is_int(i) for i in v),
    "a list of non-negative integers": lambda v: isinstance(v, list) and all(_is_int(i) and i >= 0 for i in v),
}


def _refuse(where: str, what: str) -> errors.TgradError:
    return errors.InvalidArgumentError(f"{where}: {what}")


def _field(record: Mapping[str, Any], key: str, kind: str, where: str, default: Any = _REQUIRED) -> Any:
    """record[key] when it is of `kind`; `default` when absent (else refused)."""
    if key not in record:
        if default is _REQUIRED:
            raise _refuse(where, f"no {key!r} field")
        return default
    value = record[key]
    if not _FIELD_TYPES[kind](value):
        text = repr(value)
        raise _refuse(where, f"field {key!r} is not {kind}: {text[:60]}{'...' if len(text) > 60 else ''}")
    return value


def _elementwise_arity() -> dict[str, int]:
    """The elementwise ops' names and arities, from libtgrad's registry (tgrad.ops reads it)."""
    from .ops import REGISTRY

    return {name: info.arity for name, info in REGISTRY.items()}


def known_kinds() -> frozenset[str]:
    """Every kind a trace records: sources, matmul, the view ops and the registry's ops."""
    return SOURCE_KINDS | VIEW_KINDS | {"matmul"} | frozenset(_elementwise_arity()) | _trace_kinds.KINDS


@dataclass(frozen=True)
class OpResult:
    """The replay of one op: state "passed", "failed", "skipped" or "source" (not replayed)."""

    op: int
    kind: str
    state: str
    detail: str = ""
    #: For a value mismatch: the first differing element's index in the op's output.
    index: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Validation:
    """The outcome of Trace.validate(): ``state`` is "failed" when any op failed, else "passed";
    ``message`` names the first offending op; ``results`` has one OpResult per op."""

    state: str
    message: str
    results: tuple[OpResult, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return self.state == "passed"

    @property
    def failed_ops(self) -> list[int]:
        return [r.op for r in self.results if r.state == "failed"]

    def __bool__(self) -> bool:
        return self.passed


class Trace:
    """What one tgrad.trace call recorded; see the module docstring."""

    def __init__(self, ops: Sequence[TraceOp], outputs: Sequence[int], *,
                 options: Mapping[str, Any] | None = None, plans: Sequence[Any] = (),
                 library_version: str = "", result: Any = None) -> None:
        self.ops: list[TraceOp] = list(ops)
        self.outputs: tuple[int, ...] = tuple(outputs)
        self.options: dict[str, Any] = dict(options or {})
        #: libtgrad's explain plan (JSON, as a dict) of each output: what its realization ran.
        self.plans: list[Any] = list(plans)
        self.library_version = library_version
        #: What fn returned (its Tensors hold their handles while the trace is alive).
        self.result = result

    @property
    def output_ops(self) -> list[TraceOp]:
        """The ops fn returned, in the order it returned them."""
        return [self.ops[i] for i in self.outputs]

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[TraceOp]:
        return iter(self.ops)

    def __getitem__(self, index: int) -> TraceOp:
        return self.ops[index]

    def __repr__(self) -> str:
        kinds = ", ".join(op.kind for op in self.ops)
        return f"Trace({len(self.ops)} ops: {kinds}; outputs {list(self.outputs)})"

    # ---- JSON -----------------------------------------------------------------------------------
    def to_dict(self, *, payloads: bool = False) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "library_version": self.library_version,
            "options": self.options,
            "outputs": list(self.outputs),
            "ops": [op.to_dict(payloads) for op in self.ops],
            "plans": self.plans,
        }

    def to_json(self, *, payloads: bool = False, indent: int | None = None) -> str:
        """The trace as JSON (keys sorted; schema in docs/observability.md). Payloads are given by
        size and SHA-256; payloads=True adds their bytes (base64, little-endian bf16), which
        Trace.from_json reads back so that a stored trace can be validated later."""
        return json.dumps(self.to_dict(payloads=payloads), sort_keys=True, indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> Trace:
        """The Trace of a `to_json` document (payloads=True to validate it later). Text that is
        not JSON, another schema, a missing field or one of the wrong type raises
        InvalidArgumentError naming what is wrong."""
        where = "Trace.from_json"
        try:
            data = json.loads(text)
        except (ValueError, TypeError, RecursionError) as exc:  # also bad UTF-8, ints of 4300+ digits
            raise _refuse(where, f"not a JSON document ({type(exc).__name__}: {str(exc)[:100]})") from None
        if not isinstance(data, dict):
            raise _refuse(where, f"the document is a JSON {type(data).__name__}, not a JSON object")
        if data.get("schema") != SCHEMA:
            raise _refuse(where, f"schema {data.get('schema')!r} is not {SCHEMA!r}")
        records = _field(data, "ops", "a list", where)
        ops = [TraceOp.from_dict(r, where=f"{where}: op {i}") for i, r in enumerate(records)]
        for i, op in enumerate(ops):
            if op.id != i:
                raise _refuse(f"{where}: op {i}", f"field 'id' is {op.id}, not its position {i}")
        outputs = _field(data, "outputs", "a list of integers", where)
        for i in outputs:
            if not 0 <= i < len(ops):
                raise _refuse(where, f"output {i} is not one of the {len(ops)} ops")
        return cls(ops, outputs, options=_field(data, "options", "an object", where, {}),
                   plans=_field(data, "plans", "a list", where, []),
                   library_version=_field(data, "library_version", "a string", where, ""))

    # ---- replay ---------------------------------------------------------------------------------
    def validate(self) -> Validation:
        """Replay every op through the oracle on its recorded inputs, bit for bit; see the module
        docstring. Needs `tgrad.conformance` (installed with tgrad) for matmul and elementwise
        ops."""
        results = tuple(_replay(op, self.ops, _oracles({op.kind for op in self.ops}))
                        for op in self.ops)
        failed = [r for r in results if r.state == "failed"]
        counts = {s: sum(1 for r in results if r.state == s)
                  for s in ("passed", "failed", "skipped", "source")}
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        if failed:
            first = failed[0]
            return Validation("failed", f"op {first.op} ({first.kind}) failed: {first.detail} "
                              f"[{summary}]", results)
        return Validation("passed", f"every op replayed bit-exact [{summary}]", results)


#: The oracle function that replays each kind of computed op: (conformance module, function).
_ORACLES = {"matmul": ("oracle", "matmul_bits"), "elementwise": ("elementwise", "elementwise_bits")}


def _oracle(which: str) -> Callable[..., np.ndarray]:
    from . import _conformance

    module, function = _ORACLES[which]
    try:
        found: Callable[..., np.ndarray] = getattr(_conformance.module(module), function)
    except ImportError as exc:
        raise ModuleNotFoundError(
            f"Trace.validate() replays {which} ops through tgrad.conformance.{module}, which is "
            f"not importable ({exc}); it is installed with tgrad") from exc
    return found


def _oracles(kinds: set[str]) -> dict[str, Callable[..., np.ndarray]]:
    """The oracles the trace's kinds need, imported once (and only those: a trace of views
    validates without the conformance package)."""
    needed = {"matmul"} & kinds
    if kinds & set(_elementwise_arity()):
        needed.add("elementwise")
    return {which: _oracle(which) for which in sorted(needed)}


# ---- replaying one op -----------------------------------------------------------------------------
def _decode_key(items: Sequence[Any]) -> tuple[Any, ...]:
    key: list[Any] = []
    for item in items:
        if item == "...":
            key.append(Ellipsis)
        elif isinstance(item, dict):
            key.append(slice(*item["slice"]))
        else:
            key.append(int(item))
    return tuple(key)


def _expand_shape(shape: Sequence[int], src: tuple[int, ...]) -> tuple[int, ...]:
    lead = len(shape) - len(src)
    return tuple(src[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(shape))


def _replay_view(op: TraceOp, x: np.ndarray) -> np.ndarray:
    kind, args = op.kind, op.args
    if kind == "transpose":
        axes = args.get("axes")
        return x.T if axes is None else np.swapaxes(x, axes[0], axes[1])
    if kind == "permute":
        return np.transpose(x, args["axes"])
    if kind == "expand":
        return np.broadcast_to(x, _expand_shape(args["shape"], x.shape))
    if kind in ("reshape", "view"):
        return x.reshape(args["shape"])
    if kind in ("slice", "select"):
        picked: np.ndarray = x[_decode_key(args["key"])]  # a key of Any items: numpy types it Any
        return picked
    if kind == "contiguous":
        return x
    raise ValueError(f"no replay for op kind {kind!r}")


def _exact_route(route: str) -> bool:
    """CPU routes (and host data) promise bit-exact results; a tensor-core route does not."""
    return "tc" not in route.split(".")


def _matmul_replay(oracle: Callable[..., np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """torch.matmul's rule over the 2-D oracle: 1-D operands promoted ([K] as [1, K] on the
    left, [K, 1] on the right), the batch axes broadcast, each batch the 2-D product, the added
    axes removed (what tgrad_matmul computes: each batch's bytes are its 2-D product's)."""
    if a.ndim == 2 and b.ndim == 2:
        return np.asarray(oracle(a, b), dtype=np.uint16)
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a3 = np.broadcast_to(a2, (*batch, *a2.shape[-2:])).reshape(-1, *a2.shape[-2:])
    b3 = np.broadcast_to(b2, (*batch, *b2.shape[-2:])).reshape(-1, *b2.shape[-2:])
    out = np.empty((a3.shape[0], a2.shape[-2], b2.shape[-1]), np.uint16)
    for i in range(out.shape[0]):
        out[i] = np.asarray(oracle(a3[i], b3[i]), dtype=np.uint16)
    shape = (*batch, *(() if a.ndim == 1 else (a2.shape[-2],)), *(() if b.ndim == 1 else (b2.shape[-1],)))
    return out.reshape(shape)


def _replay(op: TraceOp, ops: Sequence[TraceOp], oracles: Mapping[str, Callable[..., np.ndarray]]) -> OpResult:
    def result(state: str, detail: str = "", index: tuple[int, ...] | None = None) -> OpResult:
        return OpResult(op.id, op.kind, state, detail, index)

    if op.kind in SOURCE_KINDS:
        return result("source", f"{op.origin} data (not replayed)")
    if op.payload is None:
        return result("skipped", "not on the path to an output and never realized: no payload")
    sources = [ops[i] for i in op.inputs]
    elementwise = _elementwise_arity()
    wanted = elementwise.get(op.kind, _INPUT_COUNTS.get(op.kind))
    if wanted is None and op.kind in _INPUT_COUNTS:  # any number of inputs, at least one (concat)
        wanted = len(sources) or 1
    if len(sources) != wanted:  # only a stored trace can say so; a call records its operands
        return result("failed", f"a {op.kind} op replays from {wanted} input(s), it has "
                                f"{len(sources)}")
    if any(s.payload is None for s in sources):
        return result("skipped", "an input has no payload")
    if op.kind in ZERO_COPY_KINDS and sources[0].buffer_id != op.buffer_id:
        return result("failed", f"a {op.kind} is zero-copy, but its buffer #{op.buffer_id} is not "
                                f"its input's #{sources[0].buffer_id}")
    try:
        if op.kind == "matmul":
            if not _exact_route(op.route):
                return result("skipped", f"route {op.route} promises an error bound, not bit-exact "
                                         "results; no bound is stated to check against yet")
            order = op.args.get("order", "pairwise") if isinstance(op.args, Mapping) else "pairwise"
            want = _matmul_replay(functools.partial(oracles["matmul"], order=order), np.asarray(sources[0].payload),
                                  np.asarray(sources[1].payload))
        elif op.kind in _trace_kinds.REDUCE_KINDS:
            want = _trace_kinds.replay_reduction(op.kind, op.args, np.asarray(sources[0].payload), sources[0].dtype)
        elif op.kind in _trace_kinds.NORM_KINDS:
            return result("skipped", "a norm: the trace has no oracle for it (tests/python/test_norms.py proves "
                                     "its bytes against an exact reference)")
        elif op.kind == _trace_kinds.CAST_KIND:
            want = _trace_kinds.replay_cast(op.args, np.asarray(sources[0].payload), sources[0].dtype)
        elif op.kind in _trace_kinds.SHAPE_KINDS:
            want = _trace_kinds.replay_shape(op.kind, op.args, [np.asarray(s.payload) for s in sources])
        elif op.kind in _trace_kinds.COMPARE_KINDS:
            want = _trace_kinds.replay_compare(op.kind, np.asarray(sources[0].payload), sources[0].dtype,
                                               np.asarray(sources[1].payload), sources[1].dtype)
        elif op.kind == _trace_kinds.WHERE_KIND:
            want = _trace_kinds.replay_where(*(np.asarray(s.payload) for s in sources))
        elif op.kind in _trace_kinds.SOFTMAX_BACKWARD_KINDS:
            want = _trace_kinds.replay_softmax_backward(op.kind, op.args, np.asarray(sources[0].payload),
                                                        sources[0].dtype, np.asarray(sources[1].payload),
                                                        sources[1].dtype)
        elif op.kind in _trace_kinds.SOFTMAX_KINDS:
            want = _trace_kinds.replay_softmax(op.kind, op.args, np.asarray(sources[0].payload), sources[0].dtype)
        elif op.kind in elementwise and (op.dtype != "bfloat16" or any(s.dtype != "bfloat16" for s in sources)):
            return result("skipped", "a float32 elementwise op: the trace's oracle replays bfloat16 ops only "
                                     "(tests/python/test_elementwise_f32_reference.py proves the float32 ones)")
        elif op.kind in elementwise:
            want = np.asarray(oracles["elementwise"](op.kind, *(s.payload for s in sources)),
                              dtype=np.uint16)
        else:
            want = _replay_view(op, np.asarray(sources[0].payload, dtype=_trace_kinds.BITS[sources[0].dtype]))
    except ModuleNotFoundError:
        raise  # the oracle lacks a module (mpmath): the op is not judged, validate() says why
    except Exception as exc:  # the recorded inputs do not fit the op: a wrong shape or view
        return result("failed", f"replay raised {type(exc).__name__}: {exc}")
    got = np.asarray(op.payload)
    if want.shape != tuple(op.shape) or got.shape != want.shape:
        return result("failed", f"shape {tuple(op.shape)} (payload {got.shape}), "
                                f"replay gives {want.shape}")
    differs = got != want
    if differs.any():
        index = tuple(int(i) for i in np.argwhere(differs)[0])
        return result("failed", f"{int(differs.sum())} of {want.size} elements differ from the "
                                f"oracle; first at index {index}: got 0x{int(got[index]):04x}, "
                                f"want 0x{int(want[index]):04x}", index)
    how = "numpy view" if op.kind in VIEW_KINDS else "oracle"
    return result("passed", f"bit-exact against the {how} (route {op.route})")


# ---- recording ------------------------------------------------------------------------------------
def _key_items(key: Any) -> list[Any]:
    items = key if isinstance(key, tuple) else (key,)
    encoded: list[Any] = []
    for item in items:
        if item is Ellipsis:
            encoded.append("...")
        elif isinstance(item, slice):
            encoded.append({"slice": [None if v is None else operator.index(v)
                                      for v in (item.start, item.stop, item.step)]})
        else:
            encoded.append(operator.index(item))
    return encoded


def _ints(values: Sequence[Any]) -> list[int]:
    if len(values) == 1 and isinstance(values[0], (tuple, list)):
        values = values[0]
    return [operator.index(v) for v in values]


def _op_args(kind: str, params: list[Any], kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(kind, JSON-able arguments) of a reported call; Tensor arguments are already removed."""
    if kind == "matmul":  # the accumulation order the product was made in (tgrad.matmul_order)
        from .orders import get_matmul_order

        order = kwargs.get("order")
        return kind, {"order": order if isinstance(order, str) else get_matmul_order()}
    if kind == "transpose":
        a0 = params[0] if params else kwargs.get("axis0")
        a1 = params[1] if len(params) > 1 else kwargs.get("axis1")
        if a0 is None or a1 is None:  # transpose() and .T: every axis reversed
            return kind, {"axes": None}
        return kind, {"axes": [operator.index(a0), operator.index(a1)]}
    if kind == "permute":
        return kind, {"axes": _ints(params)}
    if kind in ("expand", "reshape", "view"):
        return kind, {"shape": _ints(params)}
    if kind in _trace_kinds.KINDS:
        return kind, _trace_kinds.args_of(kind, kwargs)
    if kind == "getitem":
        items = _key_items(params[0])
        return ("select" if any(isinstance(i, int) for i in items) else "slice"), {"key": items}
    return kind, {}


class _Recorder:
    """Collects the ops reported while fn runs; holds their Tensors until the payloads are read."""

    def __init__(self) -> None:
        self.ops: list[TraceOp] = []
        self.tensors: list[Tensor] = []
        self.by_handle: dict[int, int] = {}

    def add(self, tensor: Tensor, kind: str, inputs: tuple[int, ...], args: dict[str, Any],
            origin: str) -> int:
        op_id = len(self.ops)
        self.ops.append(TraceOp(op_id, kind, inputs, args, origin=origin))
        self.tensors.append(tensor)
        self.by_handle[tensor._handle] = op_id
        return op_id

    def op_of(self, tensor: Tensor) -> int:
        """The op that made this tensor; a tensor from outside fn becomes a captured input."""
        found = self.by_handle.get(tensor._handle)
        if found is None:
            found = self.add(tensor, "input", (), {}, "captured")
        return found

    def report(self, kind: str, out: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        if not isinstance(out, Tensor) or not out._handle:
            return
        inputs: tuple[int, ...] = ()
        op_args: dict[str, Any] = {}
        if kind != "constant":
            inputs = tuple(self.op_of(a) for a in args if isinstance(a, Tensor))
            params = [a for a in args if not isinstance(a, (Tensor, type))]
            kind, op_args = _op_args(kind, params, kwargs)
        known = self.by_handle.get(out._handle)
        if known is not None:
            # An outer call reporting what an inner one made (T -> permute): the outer one names it.
            op = self.ops[known]
            if op.origin == "fn" and op.inputs == inputs:
                op.kind, op.args = kind, op_args
            return
        self.add(out, kind, inputs, op_args, "fn")


def _is_container(value: Any) -> bool:
    return isinstance(value, (tuple, list, Mapping))


def _output_tensors(value: Any) -> list[Tensor]:
    """The Tensors in fn's return value: a Tensor, or nested tuples, lists and dict values, in
    order. Walked with a stack of its own (any depth, no RecursionError); a container that holds
    itself, at any depth, raises InvalidArgumentError (one held twice side by side is fine)."""
    if isinstance(value, Tensor):
        return [value]
    if not _is_container(value):
        return []
    found: list[Tensor] = []
    path: list[Any] = [value]  # the containers being walked, outermost first
    on_path = {id(value)}
    stack: list[Iterator[Any]] = [iter(value.values() if isinstance(value, Mapping) else value)]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
            on_path.discard(id(path.pop()))
        elif isinstance(item, Tensor):
            found.append(item)
        elif _is_container(item):
            if id(item) in on_path:
                raise errors.InvalidArgumentError(
                    f"tgrad.trace: fn returned a {type(value).__name__} that contains itself (a "
                    f"{type(item).__name__} {len(path)} level(s) down refers back to an enclosing one); "
                    "return a Tensor, or a tuple, list or dict of Tensors without cycles")
            path.append(item)
            on_path.add(id(item))
            stack.append(iter(item.values() if isinstance(item, Mapping) else item))
    return found


_END: Any = object()


def _check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options resolved, or TraceOptionUnsupportedError for one the runtime cannot honour."""
    from . import backends, cpu_isas

    refuse = errors.TraceOptionUnsupportedError
    unknown = [name for name in options if name not in OPTIONS]
    if unknown:
        raise refuse(f"tgrad.trace: unknown option {unknown[0]!r} (known: {', '.join(OPTIONS)})")
    device = options.get("device", "cpu")
    if device != "cpu":
        rows = {b.name: b for b in backends()}
        if device not in rows:
            raise refuse(f"tgrad.trace: device {device!r} is not a backend ({', '.join(rows)})")
        row = rows[device]
        if not row.built or not row.available:
            state = "not built" if not row.built else "not available"
            raise refuse(f"tgrad.trace: device {device!r} is {state}: {row.device}")
        raise refuse(f"tgrad.trace: device {device!r}: the runtime does not dispatch to it yet "
                     "(only cpu)")
    resolved: dict[str, Any] = {"device": "cpu"}
    isa = options.get("cpu_isa")
    if isa == "auto":
        resolved["cpu_isa"] = isa
    elif isa is not None:
        variants = cpu_isas()
        if not isinstance(isa, str) or isa not in variants:
            raise refuse(f"tgrad.trace: cpu_isa {isa!r} is not a CPU variant "
                         f"({', '.join(variants)})")
        if not variants[isa]:
            raise refuse(f"tgrad.trace: cpu_isa {isa!r} cannot run on this CPU")
        resolved["cpu_isa"] = isa
    threads = options.get("threads")
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads < 1 << 31:
            raise refuse(f"tgrad.trace: threads must be an int >= 1, got {threads!r}")
        resolved["threads"] = threads
    return resolved


def trace(fn: Callable[..., Any], *tensors: Any, **options: Any) -> Trace:
    """Run fn(*tensors) recording every op it makes, realize its outputs once, read every op's
    payload, and return the Trace. Refusals, before anything runs: TraceNoInputError (no Tensor
    among tensors), TraceOptionUnsupportedError (an unknown option or one the runtime cannot
    honour); after fn ran but before anything is realized: TraceNoOutputError (fn returned no
    Tensor)."""
    from . import _cpu_isa_setting, num_threads, set_cpu_isa, set_num_threads, version

    if not callable(fn):
        raise errors.InvalidArgumentError(f"tgrad.trace: fn must be callable, got {type(fn).__name__}")
    if not any(isinstance(t, Tensor) for t in tensors):
        raise errors.TraceNoInputError(
            "tgrad.trace: no Tensor among the inputs (give fn's Tensors after it: "
            "tgrad.trace(fn, a, b))")
    for t in tensors:
        if isinstance(t, Tensor):
            t._h  # a released input is refused now, not inside fn  # noqa: B018
    resolved = _check_options(options)

    recorder = _Recorder()
    for t in tensors:
        if isinstance(t, Tensor) and t._handle not in recorder.by_handle:
            recorder.add(t, "input", (), {}, "argument")
    token = _RECORDER.set(recorder)
    try:
        result = fn(*tensors)
    finally:
        _RECORDER.reset(token)
    try:
        outputs = _output_tensors(result)
        if not outputs:
            raise errors.TraceNoOutputError(
                f"tgrad.trace: fn returned {type(result).__name__}, not a Tensor (or a tuple, list "
                "or dict of them)")
        output_ids = [recorder.op_of(t) for t in outputs]
        saved_isa, saved_threads = _cpu_isa_setting(), num_threads()
        # Unless the caller names a variant, the selection in force is kept as it is: "auto"
        # picks one variant for packed products and another for streamed ones, and forcing the
        # packed one would give a traced product another route than the same product untraced.
        resolved.setdefault("cpu_isa", saved_isa)
        resolved.setdefault("threads", saved_threads)
        try:
            set_cpu_isa(resolved["cpu_isa"])
            set_num_threads(resolved["threads"])
            # The plans are read first: explain shows what realizing will run (it runs nothing).
            plans = [t.explain(json=True) for t in outputs]
            for t in outputs:
                t.realize()
        finally:
            set_cpu_isa(saved_isa)
            set_num_threads(saved_threads)
        reached = _reached(recorder.ops, output_ids)
        for op, tensor in zip(recorder.ops, recorder.tensors):
            op.shape, op.strides, op.offset = tensor.shape, tensor.strides, tensor.offset
            op.buffer_id, op.route = tensor.buffer_id, tensor.route
            # Reached ops were computed by the realization above, so reading runs nothing new;
            # an op off that path is read only if its buffer already holds data.
            op.dtype = tensor.dtype.name
            if op.id in reached or tensor.is_realized:
                op.payload = _trace_kinds.payload_bits(tensor.numpy())
    finally:
        recorder.tensors.clear()
        recorder.by_handle.clear()
    return Trace(recorder.ops, output_ids, options=resolved, plans=plans,
                 library_version=version(), result=result)


def _reached(ops: Sequence[TraceOp], outputs: Sequence[int]) -> set[int]:
    seen: set[int] = set()
    stack = list(outputs)
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(ops[i].inputs)
    return seen

