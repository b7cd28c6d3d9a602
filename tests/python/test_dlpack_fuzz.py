"""Property test (hypothesis) over forged DLPack capsules: random devices, dtypes, lanes, ndim,
shapes, strides (huge and negative too), byte offsets, NULL pointers and versions, behind a
producer whose __dlpack_device__ is honest, lies, is garbled or is missing.

tgrad.from_dlpack must give either a tensor whose bytes equal the model's gather of the producer's
memory, or a tgrad error of the class the fault calls for; the producer's deleter runs exactly once
for every capsule made (after the tgrad tensor is released, for zero-copy imports); no tgrad tensor
or import entry is left behind, and nothing is reported as an ignored exception.

Examples: 40 by default (quick in `nox -s tests`); TGRAD_FUZZ_EXAMPLES=N runs N (`nox -s fuzz`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tgrad
from tgrad import _dlpack, errors

import dlpack_forge as forge
from dlpack_forge import KDL_BFLOAT, KDL_CPU, KDL_FLOAT, CpuProducer, Forged, Producer

EXAMPLES = int(os.environ.get("TGRAD_FUZZ_EXAMPLES", "40"))
INT64_MAX = (1 << 63) - 1
TAKEN = [(KDL_BFLOAT, 16, 1), (KDL_FLOAT, 16, 1), (KDL_FLOAT, 32, 1), (KDL_FLOAT, 64, 1)]


@dataclasses.dataclass
class Case:
    forged: Forged
    store_bytes: int
    refusal: tuple[type, ...] | None  # None: the capsule is honest
    answer: Any  # what __dlpack_device__ says; "missing": no such method
    legacy_only: bool
    seed: int


def _span(shape: list[int], strides: list[int]) -> tuple[int, int]:
    if any(n == 0 for n in shape):
        return 0, 0
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides))
    return lo, hi


def _compact(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= max(n, 1)
    return strides


@st.composite
def honest(draw: Any) -> Forged:
    """A valid CPU capsule over a store that holds every element it reaches."""
    versioned = draw(st.booleans())
    dtype = draw(st.sampled_from(TAKEN))
    itemsize = dtype[1] // 8
    ndim = draw(st.integers(0, 8))
    shape = draw(st.lists(st.integers(0, 3 if ndim <= 4 else 2), min_size=ndim, max_size=ndim))
    strides = draw(st.none() | st.lists(st.integers(-7, 7), min_size=ndim, max_size=ndim))
    lo, hi = _span(shape, _compact(shape) if strides is None else strides)
    front, back = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    origin = (front - lo) * itemsize  # element [0, ...] in the store, in bytes
    split = draw(st.booleans())  # the origin as byte_offset, or in data itself
    null_data = any(n == 0 for n in shape) and draw(st.booleans())  # allowed with no element
    return Forged(
        versioned=versioned, version=(1, draw(st.integers(0, 2**32 - 1))), flags=draw(st.integers(0, 2**64 - 1)),
        dtype=dtype, shape=shape, strides=strides, data=None if null_data else (0 if split else origin),
        byte_offset=origin if split else 0, store_bytes=(hi - lo + 1 + front + back) * itemsize)


def _nonempty(forged: Forged) -> bool:
    return all(n > 0 for n in forged.shape or [])


def _axis(draw: Any, forged: Forged) -> int:
    """An axis made to hold at least 2 elements and explicit strides (for stride faults)."""
    assert forged.shape is not None
    if not forged.shape:
        forged.shape = [2]
        forged.strides = [1]
    shape = forged.shape
    axis = draw(st.integers(0, len(shape) - 1))
    shape[:] = [max(n, 1) for n in shape]
    shape[axis] = max(shape[axis], 2)
    forged.data = 0 if forged.data is None else forged.data  # it holds elements now
    forged.strides = _compact(shape) if forged.strides is None else forged.strides
    return axis


def fault(draw: Any, forged: Forged) -> tuple[type, ...] | None:
    """Break one field of an honest capsule; the tgrad error classes that refusal may take, or
    None where the fault does not apply (the capsule stays honest)."""
    kind = draw(st.sampled_from(["none", "device", "dtype", "lanes", "ndim", "null shape", "negative extent",
                                 "huge stride", "huge extents", "null data", "misaligned", "address high",
                                 "address low", "version"]))
    dtype = forged.dtype
    if kind == "device":
        kind_ = draw(st.sampled_from([2, 3, 4, 7, 8, 9, 10, 11, 13, 14, 15, 16]) | st.integers(-2**31, 2**31 - 1))
        device_id = draw(st.integers(-2**31, 2**31 - 1))
        if kind_ == KDL_CPU and device_id == 0:
            return None
        forged.device = (kind_, device_id)
        return (errors.DeviceMismatchError,)
    if kind == "dtype":
        code, bits = draw(st.integers(0, 255)), draw(st.integers(0, 255))
        if (code, bits, dtype[2]) in TAKEN:
            return None
        forged.dtype = (code, bits, dtype[2])
        return (errors.DtypeUnsupportedError,)
    if kind == "lanes":
        forged.dtype = (dtype[0], dtype[1], draw(st.sampled_from([0, 2, 4, 16, 65535])))
        return (errors.DtypeUnsupportedError,)
    if kind == "ndim":
        forged.ndim = draw(st.integers(-2**31, -1) | st.integers(9, 2**31 - 1))
        return (errors.InvalidArgumentError,)
    if kind == "null shape":
        forged.ndim, forged.shape, forged.strides = max(len(forged.shape or []), 1), None, None
        return (errors.InvalidArgumentError,)
    if kind == "negative extent":
        if not forged.shape:
            return None
        forged.shape[draw(st.integers(0, len(forged.shape) - 1))] = draw(st.integers(-2**63, -1))
        return (errors.InvalidArgumentError,)
    if kind == "huge stride":
        axis = _axis(draw, forged)
        assert forged.strides is not None
        forged.strides[axis] = draw(st.integers(2**62, INT64_MAX) | st.integers(-2**63, -2**62))
        return (errors.SizeOverflowError,)
    if kind == "huge extents":
        shape = forged.shape or [1]
        forged.shape = [draw(st.integers(2**31, INT64_MAX)) for _ in shape[:2]] + [max(n, 1) for n in shape[2:]]
        if len(forged.shape) == 1:
            forged.shape[0] = draw(st.integers(2**62, INT64_MAX))
        forged.strides = [0] * len(forged.shape)
        return (errors.SizeOverflowError,)
    if kind == "null data":
        if not _nonempty(forged):
            return None
        forged.data = None
        return (errors.InvalidArgumentError,)
    if kind == "misaligned":
        if not _nonempty(forged) or forged.data is None:
            return None
        forged.byte_offset += draw(st.integers(1, dtype[1] // 8 - 1))
        return (errors.InvalidArgumentError,)
    if kind == "address high":
        if not _nonempty(forged) or forged.data is None:
            return None
        forged.byte_offset = 2**64 - draw(st.integers(1, 64)) * (dtype[1] // 8)
        return (errors.SizeOverflowError,)
    if kind == "address low":  # a real pointer near 0 that a negative stride takes below 0
        axis = _axis(draw, forged)
        assert forged.strides is not None
        forged.strides[axis] = -draw(st.integers(2**20, 2**40))
        forged.data, forged.absolute, forged.byte_offset = draw(st.integers(1, 64)) * (dtype[1] // 8), True, 0
        return (errors.SizeOverflowError,)
    if kind == "version":
        if not forged.versioned:
            return None
        forged.version = (draw(st.sampled_from([0, 2, 3]) | st.integers(2, 2**32 - 1)), forged.version[1])
        return (errors.VersionMismatchError,)
    return None


@st.composite
def cases(draw: Any) -> Case:
    forged = draw(honest())
    store_bytes = forged.store_bytes
    refusal = fault(draw, forged)
    answer = draw(st.sampled_from(["honest", "missing", (KDL_CPU, 0), (2, 0), "x", (1,), None]))
    if answer == "honest":
        answer = forged.device
    return Case(forged, store_bytes, refusal, answer, draw(st.booleans()) and not forged.versioned,
                draw(st.integers(0, 2**32 - 1)))


@contextlib.contextmanager
def _no_unraisable() -> Iterator[list[Any]]:
    seen: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        yield seen
    finally:
        sys.unraisablehook = hook
    assert seen == [], seen


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=cases())
def test_a_forged_capsule_comes_in_correctly_or_is_refused_and_freed_once(case: Case) -> None:
    forged = case.forged
    store = forge.store_for(dataclasses.replace(forged, store_bytes=case.store_bytes), case.seed)
    expected = forge.gather(forged, store) if case.refusal is None else None
    if case.answer == "missing":
        producer: Producer = Producer(forged, store, legacy_only=case.legacy_only)
    else:
        producer = CpuProducer(forged, store, answer=case.answer, legacy_only=case.legacy_only)
    del store  # the capsule owns the memory: its deleter frees it (a later read is a use-after-free)
    live, imports = tgrad.live_tensors(), dict(_dlpack._imports)
    with _no_unraisable():
        try:
            t = tgrad.from_dlpack(producer)
        except errors.TgradError as exc:
            error: errors.TgradError | None = exc
        else:
            error = None
        answer = case.answer
        if answer != "missing" and not (isinstance(answer, tuple) and len(answer) == 2):
            assert isinstance(error, errors.InvalidArgumentError) and producer.made == [], repr(error)
        elif answer != "missing" and answer[0] != KDL_CPU:
            assert isinstance(error, errors.DeviceMismatchError) and producer.made == [], repr(error)
        elif case.refusal is not None:
            assert isinstance(error, case.refusal), repr(error)
        else:
            assert error is None, repr(error)
            zero_copy = forged.dtype[0] == KDL_BFLOAT and _nonempty(forged)
            assert producer.deleter_calls() == [0 if zero_copy else 1]
            assert t.to_bytes() == expected
            t.release()
        assert producer.deleter_calls() == [1] * len(producer.made)
        assert tgrad.live_tensors() == live and _dlpack._imports == imports
