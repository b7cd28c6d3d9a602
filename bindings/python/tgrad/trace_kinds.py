"""tgrad.trace for the reductions and casts (tgrad.reductions), the softmax kind (tgrad.softmax),
the shape ops concat and gather (tgrad.shape_ops), the comparisons and where (tgrad.compare) and
the norms (tgrad.norms): how their arguments are recorded, how payloads of every dtype are stored,
and how validation replays them against the exact references (tgrad.conformance.exact for sums,
means and extrema; the documented conversions for casts; tgrad.conformance.softmax for softmax,
log_softmax and logsumexp; numpy's concatenate and take on the payloads' bits for the shape ops;
numpy's exact comparisons and selection of bits). trace.py calls in here; nothing here runs
libtgrad."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import numpy as np

#: Reductions recorded by tgrad.trace, and the cast.
REDUCE_KINDS = frozenset({"sum", "mean", "max", "min", "argmax", "argmin"})
CAST_KIND = "cast"
#: The shape ops that copy (cat, stack, take, x[ids]); the views are recorded as view kinds.
SHAPE_KINDS = frozenset({"concat", "gather"})
#: The comparisons (2 inputs, a bool result) and where (3 inputs: the bool condition, then values).
COMPARE_KINDS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
WHERE_KIND = "where"
#: How many inputs each kind replays from: gather (x, indices); concat any number (None).
INPUT_COUNTS: dict[str, int | None] = {**{kind: 1 for kind in REDUCE_KINDS | {CAST_KIND}},
                                       **{kind: 2 for kind in COMPARE_KINDS}, WHERE_KIND: 3,
                                       "gather": 2, "concat": None}
#: The norms and rope (tgrad.norms): recorded with their arguments, reported as skipped on replay (their
#: exact reference is tests/python/norm_reference.py, too slow for a trace's oracle).
NORM_KINDS = frozenset({"rms_norm", "layer_norm", "rope", "rope_backward"})
#: The softmax kind's ops (tgrad.softmax), replayed by tgrad.conformance.softmax (mpmath).
SOFTMAX_KINDS = frozenset({"softmax", "log_softmax", "logsumexp"})
#: hgsoft: their derivatives (forward output, gradient), replayed by tgrad.conformance.softmax too.
SOFTMAX_BACKWARD_KINDS = frozenset({"softmax_backward", "log_softmax_backward"})
INPUT_COUNTS.update({kind: 2 for kind in SOFTMAX_BACKWARD_KINDS})
KINDS = (REDUCE_KINDS | {CAST_KIND} | SHAPE_KINDS | COMPARE_KINDS | {WHERE_KIND} | NORM_KINDS | SOFTMAX_KINDS
         | SOFTMAX_BACKWARD_KINDS)
#: A payload's bits by dtype: bf16 as uint16, float32 and int32 as uint32 words (little-endian),
#: bool as bytes (0 or 1).
BITS: dict[str, np.dtype[Any]] = {"bfloat16": np.dtype("<u2"), "float32": np.dtype("<u4"),
                                  "int32": np.dtype("<u4"), "bool": np.dtype("u1")}
_ENGINE = {"bfloat16": 1, "float32": 2}  # tgrad.conformance.exact's dtype codes (tgrad.h's)


def _exact() -> Any:
    """tgrad.conformance.exact, the exact rational references (shipped inside the package)."""
    return importlib.import_module("tgrad.conformance.exact")


def payload_bits(values: np.ndarray) -> np.ndarray:
    """A read tensor's values as their bit patterns (uint16 for bf16, uint8 for bool, uint32
    otherwise)."""
    return values.view({1: np.uint8, 2: np.uint16}.get(values.dtype.itemsize, np.uint32))


def args_of(kind: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-able arguments of a reported reduction or cast (its keywords as reduce passes them)."""
    if kind == CAST_KIND:
        return {"dtype": str(kwargs["dtype"])}
    if kind in SHAPE_KINDS:
        return {"axis": int(kwargs["axis"])}
    if kind in COMPARE_KINDS or kind == WHERE_KIND:
        return {}
    if kind in ("rope", "rope_backward"):
        return {"base": float(kwargs["base"]), "rotary_dim": int(kwargs["rotary_dim"]),
                "interleaved": bool(kwargs["interleaved"])}
    if kind in NORM_KINDS:
        return {"normalized_shape": list(kwargs["normalized_shape"]), "eps": float(kwargs["eps"])}
    if kind in SOFTMAX_BACKWARD_KINDS:
        return {"dim": int(kwargs["dim"]), "dtype": str(kwargs["dtype"])}
    if kind in SOFTMAX_KINDS:
        return {"dim": int(kwargs["dim"]), "keepdims": bool(kwargs.get("keepdims")), "dtype": str(kwargs["dtype"])}
    axes = kwargs.get("axes")
    return {"axes": None if axes is None else list(axes), "keepdims": bool(kwargs.get("keepdims")),
            "dtype": str(kwargs["dtype"])}


def _rows(x: np.ndarray, axes: list[int] | None) -> tuple[np.ndarray, tuple[int, ...]]:
    """x with the reduced axes last and flattened: [outputs, count], and the kept axes' shape."""
    nd = x.ndim
    red = list(range(nd)) if axes is None else sorted(a % nd for a in axes) if nd else []
    kept = [a for a in range(nd) if a not in red]
    moved = np.transpose(x, kept + red) if nd else x.reshape(())
    count = int(np.prod([x.shape[a] for a in red], dtype=np.int64)) if red else 1
    outer = tuple(x.shape[a] for a in kept)
    return moved.reshape(int(np.prod(outer, dtype=np.int64)), count), outer


def replay_reduction(kind: str, args: Mapping[str, Any], source: np.ndarray, source_dtype: str) -> np.ndarray:
    """The contract's result bits of a recorded reduction over the source payload's bits."""
    exact = _exact()

    out_dtype = args["dtype"]
    rows, outer = _rows(source, args.get("axes"))
    code = _ENGINE[source_dtype]
    results = []
    for row in rows:
        if kind in ("sum", "mean"):
            fn = exact.sum_bits if kind == "sum" else exact.mean_bits
            results.append(fn(row, code, _ENGINE[out_dtype]))
        else:
            index = exact.extremum_index(row.tolist(), code, kind in ("max", "argmax"))
            if kind.startswith("arg"):
                results.append(index)
            else:
                value = int(row[index])
                results.append(_widen_extremum(value, source_dtype, out_dtype))
    want = np.array(results, dtype=np.int64).reshape(outer)
    if args.get("keepdims"):
        nd = source.ndim
        red = range(nd) if args.get("axes") is None else [a % nd for a in args["axes"]]
        shape = [1 if a in red else source.shape[a] for a in range(nd)]
        want = want.reshape(shape)
    bits: np.ndarray = want.astype(BITS[out_dtype]) if out_dtype != "int32" else want.astype(np.int32).view(np.uint32)
    return bits


def _widen_extremum(bits: int, source: str, out: str) -> int:
    """An extremum's bits in the output dtype: NaN canonical, a bf16 widened exactly."""
    nan = (bits & 0x7FFF) > 0x7F80 if source == "bfloat16" else (bits & 0x7FFFFFFF) > 0x7F800000
    if nan:
        return 0x7FC0 if out == "bfloat16" else 0x7FC00000
    return bits << 16 if source == "bfloat16" and out == "float32" else bits


def values_of(bits: np.ndarray, dtype: str) -> np.ndarray:
    """A payload's exact values as float64 (every bf16, float32, int32 and bool value is exact)."""
    import ml_dtypes

    values: np.ndarray
    if dtype == "bfloat16":
        values = bits.astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    elif dtype == "float32":
        values = bits.astype(np.uint32).view(np.float32).astype(np.float64)
    elif dtype == "bool":
        values = bits.astype(np.float64)
    else:
        values = bits.astype(np.uint32).view(np.int32).astype(np.float64)
    return values


def replay_compare(kind: str, a: np.ndarray, a_dtype: str, b: np.ndarray, b_dtype: str) -> np.ndarray:
    """The bool bytes of a recorded comparison: numpy's IEEE comparison of the exact values."""
    op = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
          "ge": np.greater_equal}[kind]
    result: np.ndarray = op(values_of(a, a_dtype), values_of(b, b_dtype)).astype(np.uint8)
    return result


def replay_where(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The bits of a recorded where: a's where the condition's byte is nonzero, else b's."""
    result: np.ndarray = np.where(cond != 0, a, b)
    return result


def replay_cast(args: Mapping[str, Any], source: np.ndarray, source_dtype: str) -> np.ndarray:
    """The documented conversion of the source payload's bits to args["dtype"] (docs/numerics.md)."""
    import ml_dtypes

    out = args["dtype"]
    values = values_of(source, source_dtype)
    result: np.ndarray
    if out == "bool":  # x != 0: NaN is true
        result = (values != 0).astype(np.uint8)
        return result
    if out == "int32":
        result = np.trunc(values).astype(np.int32).view(np.uint32)
        return result
    if out == "float32":
        result = values.astype(np.float32).view(np.uint32)  # exact from bf16, RNE from int32
        return result
    if source_dtype in ("int32", "bool"):  # one rounding from the exact integer (not through float32)
        from fractions import Fraction

        exact = _exact()
        flat = [exact.round_to(Fraction(int(v)), _ENGINE["bfloat16"]) for v in values.ravel()]
        result = np.array(flat, dtype=np.uint16).reshape(values.shape)
        return result
    bits: np.ndarray = values.astype(ml_dtypes.bfloat16).view(np.uint16).copy()  # float32: exact in double, RNE once
    bits[np.isnan(values)] = 0x7FC0
    return bits


def replay_shape(kind: str, args: Mapping[str, Any], sources: list[np.ndarray]) -> np.ndarray:
    """A concat or gather replayed on its inputs' payload bits (the ops copy bits): numpy's
    concatenate, or numpy's take with the int32 index payload."""
    axis = int(args["axis"])
    if kind == "concat":
        return np.concatenate(sources, axis=axis)
    indices = np.asarray(sources[1]).astype(np.uint32).view(np.int32)
    taken: np.ndarray = np.take(sources[0], indices, axis=axis)
    return taken


def replay_softmax(kind: str, args: Mapping[str, Any], source: np.ndarray, source_dtype: str) -> np.ndarray:
    """The contract's result bits of a recorded softmax, log_softmax or logsumexp (the exact value
    rounded once: tgrad.conformance.softmax) over the source payload's bits."""
    ref = importlib.import_module("tgrad.conformance.softmax")

    out_dtype = args["dtype"]
    x = source.reshape(1) if source.ndim == 0 else source
    dim = args["dim"] % x.ndim
    moved = np.moveaxis(x, dim, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    got = [ref.reference(kind, [int(b) for b in row], source_dtype, out_dtype) for row in rows]
    if kind == "logsumexp":
        want = np.array([g[0] for g in got], dtype=np.int64).reshape(moved.shape[:-1])
        if args.get("keepdims"):
            want = np.expand_dims(want, dim)
    else:
        want = np.moveaxis(np.array(got, dtype=np.int64).reshape(moved.shape), -1, dim).reshape(source.shape)
    return want.astype(BITS[out_dtype])


def replay_softmax_backward(kind: str, args: Mapping[str, Any], y: np.ndarray, y_dtype: str, g: np.ndarray,
                            g_dtype: str) -> np.ndarray:
    """The contract's result bits of a recorded softmax_backward or log_softmax_backward over the
    payloads' bits (tgrad.conformance.softmax's exact references), row by row along dim."""
    ref = importlib.import_module("tgrad.conformance.softmax")
    fn = ref.reference_backward if kind == "softmax_backward" else ref.reference_log_backward
    out_dtype = args["dtype"]
    a, b = (y.reshape(1), g.reshape(1)) if y.ndim == 0 else (y, g)
    dim = args["dim"] % a.ndim
    ma, mb = np.moveaxis(a, dim, -1), np.moveaxis(b, dim, -1)
    ra, rb = ma.reshape(-1, ma.shape[-1]), mb.reshape(-1, mb.shape[-1])
    got = [fn([int(v) for v in r1], [int(v) for v in r2], y_dtype, g_dtype, out_dtype) for r1, r2 in zip(ra, rb)]
    want = np.moveaxis(np.array(got, dtype=np.int64).reshape(ma.shape), -1, dim).reshape(y.shape)
    return want.astype(BITS[out_dtype])
