"""Shape ops: ``cat``/``concatenate``, ``stack``, ``take``, ``squeeze``, ``unsqueeze``,
``flatten``, ``split``, ``chunk`` (also Tensor methods) and integer-array indexing (``x[ids]``).

The views (squeeze, unsqueeze, flatten where strides allow, split, chunk, ``x[None]``) are
zero-copy views of the same buffer (libtgrad's view calls). ``cat`` and ``take`` are lazy nodes
(``tgrad_concat``, ``tgrad_take``: kinds concat and gather) that read their operands through
their views and copy bytes, so any dtype works. Arguments follow torch (``dim``) and numpy
(``axis``). docs/views.md has the table of what copies and what each refuses.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import errors
from ._ffi import ffi, lib
from .errors import _check

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["cat", "concatenate", "stack", "take", "squeeze", "unsqueeze", "flatten", "split", "chunk", "slice_scatter"]

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


#: tgrad.Tensor and the trace recorder's context variable, bound by tgrad.tensor once the class
#: exists (it imports this module first, so this module cannot import it at its top).
_TENSOR: Any = None
_RECORDER: Any = None


def bind(tensor_class: Any, recorder: Any) -> None:
    global _TENSOR, _RECORDER
    _TENSOR, _RECORDER = tensor_class, recorder


def _tensor(x: Any, what: str) -> Tensor:
    if not isinstance(x, _TENSOR):
        raise errors.InvalidArgumentError(f"{what}: expected a Tensor, got {type(x).__name__}")
    tensor: Tensor = x
    return tensor


def _int(value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise errors.InvalidArgumentError(f"{what}: expected an int, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise errors.InvalidArgumentError(f"{what}: expected an int, got {type(value).__name__}") from None


def _dim(name: str, dim: Any, axis: Any, default: Any = 0) -> Any:
    """torch's dim= or numpy's axis= (one of them)."""
    if dim is not None and axis is not None:
        raise errors.InvalidArgumentError(f"{name}: give dim or axis, not both")
    return dim if dim is not None else axis if axis is not None else default


def _norm_axis(axis: Any, ndim: int, what: str) -> int:
    a = _int(axis, what)
    if not -ndim <= a < ndim:
        raise errors.IndexOutOfRangeError(f"{what}: dim {a} is out of range for a tensor of {ndim} dimensions "
                                          f"(valid: {-ndim} .. {ndim - 1})")
    return a % ndim


def _wrap(call: Any, *args: Any) -> Tensor:
    out = ffi.new("tgrad_tensor_t *")
    _check(call(*args, out))
    tensor: Tensor = _TENSOR._wrap(int(out[0]), None)
    return tensor


def _report(kind: str, out: Tensor, inputs: tuple[Tensor, ...], kwargs: dict[str, Any]) -> None:
    """Tell tgrad.trace's recorder, while one runs (tgrad.trace_kinds replays concat and gather)."""
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.report(kind, out, inputs, kwargs)


def _tensors(tensors: Any, what: str) -> list[Tensor]:
    from .tensor import Tensor

    if isinstance(tensors, Tensor) or not isinstance(tensors, Sequence):
        raise errors.InvalidArgumentError(f"{what}: expected a sequence of Tensors, got {type(tensors).__name__}")
    items = list(tensors)
    if not items:
        raise errors.InvalidArgumentError(f"{what}: expected a non-empty sequence of Tensors")
    return [_tensor(t, f"{what}: item {i}") for i, t in enumerate(items)]


_GPU_CAT_MAX = 15  # operands of one GPU concat kernel (one buffer each, and the result's)


# ---- concatenation ------------------------------------------------------------------------------
def cat(tensors: Sequence[Tensor], dim: int | None = None, *, axis: int | None = None) -> Tensor:
    """The tensors joined along an existing axis (torch.cat / numpy.concatenate): one compact
    result, each operand read through its view. Same rank, dtype, device and extents off the axis
    (else RankMismatchError, DtypeUnsupportedError, DeviceMismatchError, ShapeMismatchError)."""
    items = _tensors(tensors, "cat")
    a = _int(_dim("cat", dim, axis), "cat: dim")
    if not _INT32_MIN <= a <= _INT32_MAX:
        raise errors.IndexOutOfRangeError(f"cat: dim {a} is out of range")
    if len(items) > _GPU_CAT_MAX and items[0].device != "cpu":  # a GPU concat kernel takes 15 operands
        return cat([cat(items[i:i + _GPU_CAT_MAX], a) for i in range(0, len(items), _GPU_CAT_MAX)], a)
    handles = ffi.new("tgrad_tensor_t[]", [t._h for t in items])
    out = _wrap(lib.tgrad_concat, len(items), handles, a)
    _report("concat", out, tuple(items), {"axis": a % out.ndim})
    return out


def slice_scatter(input: Tensor, src: Tensor, dim: int = 0, start: int | Tensor = 0) -> Tensor:
    """input with its positions start .. start + src.shape[dim] - 1 along dim replaced by src
    (torch.slice_scatter with step 1; ``tgrad_slice_scatter``, kind slice_scatter), bit for bit.
    Lazy and immutable like every op: `input` keeps its values for whoever holds it. When the
    step runs and nothing else holds input (no other Tensor, no other pending op), the result
    takes input's storage and writes only src's block (no copy of input): drop your own
    reference first, as a KV cache does (``cache = slice_scatter(cache, new, 2, pos)``).
    On a GPU device the result is a new buffer, with the same bytes. Same rank, dtype, device
    and extents off dim (RankMismatchError,
    DtypeUnsupportedError, DeviceMismatchError, ShapeMismatchError); a block past the end is
    IndexOutOfRangeError. start may be an int32 Tensor of one element (``tgrad_slice_scatter_at``):
    the position is then data, read when the step runs (a captured program's input: a KV cache's
    next slot), on input's device (DeviceMismatchError); a block that does not fit is
    IndexOutOfRangeError when it is known (at once for computed data, else at realize, before
    anything is written)."""
    dst, block = _tensor(input, "slice_scatter"), _tensor(src, "slice_scatter")
    a = _int(dim, "slice_scatter: dim")
    if not _INT32_MIN <= a <= _INT32_MAX:
        raise errors.IndexOutOfRangeError(f"slice_scatter: dim {a} is out of range")
    if isinstance(start, _TENSOR):
        return _wrap(lib.tgrad_slice_scatter_at, dst._h, block._h, a, _tensor(start, "slice_scatter")._h)
    s = _int(start, "slice_scatter: start")
    if not -(1 << 63) <= s < (1 << 63):
        raise errors.IndexOutOfRangeError(f"slice_scatter: start {s} is out of range")
    return _wrap(lib.tgrad_slice_scatter, dst._h, block._h, a, s)


def concatenate(arrays: Sequence[Tensor], axis: int = 0) -> Tensor:
    """numpy's spelling of `cat`."""
    return cat(arrays, axis=axis)


def stack(tensors: Sequence[Tensor], dim: int | None = None, *, axis: int | None = None) -> Tensor:
    """The tensors joined along a new axis (torch.stack / numpy.stack): `cat` of their
    unsqueezed views. Every operand has the same shape (else ShapeMismatchError)."""
    items = _tensors(tensors, "stack")
    ndim = items[0].ndim
    a = _norm_axis(_dim("stack", dim, axis), ndim + 1, "stack")
    shape = items[0].shape
    for i, t in enumerate(items):
        if t.shape != shape:
            raise errors.ShapeMismatchError(f"stack: tensor {i} has shape {t.shape}, tensor 0 {shape}: "
                                            "stack needs equal shapes")
    return cat([unsqueeze(t, a) for t in items], a)


# ---- gather -------------------------------------------------------------------------------------
def _index_tensor(indices: Any, extent: int, what: str, device: str = "cpu") -> Tensor:
    """indices as an int32 Tensor: a Tensor is used as it is (libtgrad checks its values: at the
    call when computed, else when the gather runs); host data (ints, lists, numpy integer arrays)
    is checked here against -extent .. extent-1 and converted."""
    from . import dtypes
    from .tensor import Tensor

    if isinstance(indices, Tensor):
        if indices.dtype is not dtypes.int32:
            raise errors.DtypeUnsupportedError(f"{what}: index tensors must be int32, got {indices.dtype}")
        return indices
    arr = np.asarray(indices)
    if arr.dtype == np.bool_ or not (arr.dtype.kind in "iu" or (arr.size == 0 and arr.dtype.kind == "f")):
        raise errors.InvalidArgumentError(
            f"{what}: indices must be integers, got {arr.dtype} (boolean masks are not supported)")
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        bad = lo if lo < -extent else hi if hi >= extent else None
        if bad is not None:
            raise errors.IndexOutOfRangeError(f"{what}: index {bad} is out of range for an axis of extent {extent} "
                                              f"(valid: {-extent} .. {extent - 1})")
        if lo < _INT32_MIN or hi > _INT32_MAX:
            raise errors.IndexOutOfRangeError(f"{what}: index {bad} does not fit in int32 (indices are int32)")
    return Tensor.from_numpy(arr.astype(np.int32), dtype=dtypes.int32, device=device)


def take(x: Tensor, indices: Any, axis: int | None = 0, *, dim: int | None = None) -> Tensor:
    """numpy's take along one axis: shape x.shape[:axis] + indices.shape + x.shape[axis+1:]
    (axis=None: of x flattened). indices: an int32 Tensor, or ints, lists or numpy integer arrays;
    each in -n .. n-1 for the axis' extent n (negative ones count from the end). An index outside
    raises IndexOutOfRangeError before any work: here for host indices and computed tensors, at
    realize (nothing written) for a lazy index tensor. Any dtype of x."""
    x = _tensor(x, "take")
    if dim is not None:
        axis = dim
    if axis is None:
        x = x.reshape(-1)
        axis = 0
    if not x.ndim:
        raise errors.IndexOutOfRangeError("take: a 0-d tensor has no axis to take along")
    a = _norm_axis(axis, x.ndim, "take")
    ids = _index_tensor(indices, x.shape[a], "take", x.device)
    out = _wrap(lib.tgrad_take, x._h, ids._h, a)
    _report("gather", out, (x, ids), {"axis": a})
    return out


# ---- views --------------------------------------------------------------------------------------
def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """A view with a new axis of extent 1 at dim (-ndim-1 .. ndim)."""
    x = _tensor(x, "unsqueeze")
    shape = list(x.shape)
    a = _norm_axis(dim, len(shape) + 1, "unsqueeze")
    shape.insert(a, 1)
    return x.view(shape)


def squeeze(x: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    """A view without axes of extent 1: all of them (dim=None), or those of dim (an int or a tuple;
    an axis named whose extent is not 1 is kept, as in torch)."""
    x = _tensor(x, "squeeze")
    shape = x.shape
    if dim is None:
        drop = {i for i, e in enumerate(shape) if e == 1}
    else:
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        drop = set()
        for d in dims:
            a = _norm_axis(d, max(len(shape), 1), "squeeze") if shape else _norm_axis(d, 1, "squeeze")
            if shape and shape[a] == 1:
                drop.add(a)
    return x.view([e for i, e in enumerate(shape) if i not in drop])


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Axes start_dim .. end_dim merged into one (torch.flatten): a view where strides allow, else a
    lazy copy (reshape's rule). A 0-d tensor becomes 1-d."""
    x = _tensor(x, "flatten")
    shape = x.shape
    if not shape:
        return x.reshape(1)
    s = _norm_axis(start_dim, len(shape), "flatten: start_dim")
    e = _norm_axis(end_dim, len(shape), "flatten: end_dim")
    if s > e:
        raise errors.InvalidArgumentError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    merged = 1
    for extent in shape[s:e + 1]:
        merged *= extent
    return x.reshape([*shape[:s], merged, *shape[e + 1:]])


def split(x: Tensor, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """torch.split: views along dim of split_size each (the last one shorter), or of the given
    sizes (which must add up to the extent)."""
    x = _tensor(x, "split")
    if not x.ndim:
        raise errors.IndexOutOfRangeError("split: a 0-d tensor has no axis to split")
    a = _norm_axis(dim, x.ndim, "split")
    extent = x.shape[a]
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [_int(s, "split: section") for s in split_size_or_sections]
        if any(s < 0 for s in sizes) or sum(sizes) != extent:
            raise errors.InvalidArgumentError(
                f"split: sections {sizes} must be >= 0 and add up to the extent {extent} of dim {a}")
    else:
        size = _int(split_size_or_sections, "split: split_size")
        if size < 1 and not (size == 0 and extent == 0):
            raise errors.InvalidArgumentError(f"split: split_size must be >= 1, got {size}")
        sizes = [min(size, extent - i) for i in range(0, extent, size)] if extent else [0]
    out, at = [], 0
    lead = (slice(None),) * a
    for s in sizes:
        out.append(x[(*lead, slice(at, at + s))])
        at += s
    return tuple(out)


def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """torch.chunk: at most `chunks` views along dim, each ceil(extent / chunks) long (fewer when
    the extent runs out)."""
    x = _tensor(x, "chunk")
    n = _int(chunks, "chunk: chunks")
    if n < 1:
        raise errors.InvalidArgumentError(f"chunk: chunks must be >= 1, got {n}")
    if not x.ndim:
        raise errors.IndexOutOfRangeError("chunk: a 0-d tensor has no axis to chunk")
    a = _norm_axis(dim, x.ndim, "chunk")
    extent = x.shape[a]
    if extent == 0:
        return split(x, [0], a)
    return split(x, -(-extent // n), a)


# ---- indexing beyond numpy's basic indexing (Tensor.__getitem__) --------------------------------
def _is_array_index(item: Any) -> bool:
    from .tensor import Tensor

    if isinstance(item, Tensor):
        return True
    if isinstance(item, np.ndarray):
        return item.ndim > 0 or item.dtype == np.bool_
    return isinstance(item, (list, tuple))


def is_extended_key(key: Any) -> bool:
    """A key basic indexing does not cover: None (new axes), integer arrays, 0-d integer arrays."""
    items = key if isinstance(key, tuple) else (key,)
    return any(item is None or _is_array_index(item) or isinstance(item, np.ndarray) for item in items)


def getitem(x: Tensor, key: Any) -> Tensor:
    """numpy indexing with None, Ellipsis, ints, slices and at most one integer array (a list, a
    numpy integer array or an int32 Tensor): the views first, then `take` along the array's axis.
    As in numpy, the array's axes go where it stood when the ints and the array are adjacent,
    else first."""
    items = list(key) if isinstance(key, tuple) else [key]
    for i, item in enumerate(items):  # 0-d integer arrays are integers
        if isinstance(item, np.ndarray) and item.ndim == 0 and item.dtype != np.bool_:
            items[i] = _int(item, "Tensor index")
    arrays = [i for i, item in enumerate(items) if _is_array_index(item)]
    if len(arrays) > 1:
        raise errors.InvalidArgumentError("Tensor index: one integer-array index per subscript is supported, "
                                          f"got {len(arrays)}")
    ellipses = [i for i, item in enumerate(items) if item is Ellipsis]
    if len(ellipses) > 1:
        raise errors.InvalidArgumentError("Tensor index: only one Ellipsis (...) is allowed")
    # numpy: the ints and the array form one advanced block; separated in the key as written (by a
    # slice, None or ..., even one that stands for no axis), its axes go first
    advanced = [i for i, item in enumerate(items) if _is_array_index(item) or
                (item is not None and item is not Ellipsis and not isinstance(item, slice))]
    separated = bool(advanced) and advanced[-1] - advanced[0] + 1 != len(advanced)
    used = sum(1 for item in items if item is not None and item is not Ellipsis)
    if used > x.ndim:
        raise errors.IndexOutOfRangeError(f"too many indices: tensor is {x.ndim}-dimensional, but {used} were indexed")
    if ellipses:
        at = ellipses[0]
        items[at:at + 1] = [slice(None)] * (x.ndim - used)
    else:
        items += [slice(None)] * (x.ndim - used)
    # the basic part (its refusals typed there), the array's axis kept whole; then the new axes
    array = next((item for item in items if _is_array_index(item)), None)
    basic = tuple(slice(None) if _is_array_index(item) else item for item in items if item is not None)
    y = x[basic] if basic else x
    kept = iter(y.shape)
    shape: list[int] = []
    out_axis = -1  # the array's axis in the result of the views
    for item in items:
        if item is None:
            shape.append(1)
        elif isinstance(item, slice) or _is_array_index(item):
            out_axis = len(shape) if _is_array_index(item) else out_axis
            shape.append(next(kept))
    if list(y.shape) != shape:
        y = y.view(shape)
    if array is None:
        return y
    result = take(y, array, out_axis)
    if separated and out_axis > 0:
        nidx = result.ndim - y.ndim + 1
        order = list(range(out_axis, out_axis + nidx)) + [d for d in range(result.ndim)
                                                          if not out_axis <= d < out_axis + nidx]
        result = result.permute(order)
    return result
