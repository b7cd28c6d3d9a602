"""tgrad as the per-block kernel of a `dask.array` blocked matmul (extra ``tgrad[dask]``).

``tgrad.dask.matmul(x, y, block=(bm, bn))`` takes 2-D numpy or dask arrays of bf16 values
(``ml_dtypes.bfloat16``; float32/float64 round to bf16 per element exactly as
`Tensor.from_numpy` does) and returns a lazy ``dask.array.Array`` of ``ml_dtypes.bfloat16``. The
output is cut into ``bm x bn`` blocks; each block is ``x[rows, :] @ y[:, cols]``, one tgrad matmul
over the whole K, run wherever dask schedules it (threads, processes, a `distributed` cluster).

Blocks split only M and N, never K: every output element is computed by one tgrad matmul with the
same K-long dot product, in the accumulation order docs/kernels.md documents, so the bytes equal
the single-machine ``(Tensor.from_numpy(x) @ Tensor.from_numpy(y)).numpy()``. Splitting K would
round each partial sum separately and add the partials in another order: the bytes would differ.
"""

from __future__ import annotations

from typing import Any, Callable

import ml_dtypes
import numpy as np
import numpy.typing as npt

# An optional dependency: typed where installed (dask ships py.typed), missing where not.
import dask.array as da  # type: ignore[import-not-found, unused-ignore]

from .errors import by_code
from .tensor import Tensor

__all__ = ["matmul"]

# dask.array's functions, bound with the types tgrad relies on (older dask releases have no
# annotations; newer ones type rechunk's chunks as any of several forms).
_asarray: Callable[[Any], da.Array] = da.asarray
_blockwise: Callable[..., da.Array] = da.blockwise
_rechunk: Callable[..., da.Array] = da.rechunk

#: Output rows and columns per block when ``block`` is not given.
DEFAULT_BLOCK = 512


def _block_matmul(a_blk: npt.NDArray[Any], b_blk: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """One output block: a (bm, K) row panel times a (K, bn) column panel, through tgrad."""
    return (Tensor.from_numpy(a_blk) @ Tensor.from_numpy(b_blk)).numpy()


def _sizes(block: int | tuple[int, int]) -> tuple[int, int]:
    bm, bn = (block, block) if isinstance(block, int) else block
    if isinstance(bm, bool) or isinstance(bn, bool) or int(bm) != bm or int(bn) != bn or bm < 1 or bn < 1:
        raise ValueError(f"block must be a positive int or a pair of them (rows, cols); got {block!r}")
    return int(bm), int(bn)


def matmul(x: npt.NDArray[Any] | da.Array, y: npt.NDArray[Any] | da.Array, *,
           block: int | tuple[int, int] = DEFAULT_BLOCK) -> da.Array:
    """``x @ y`` as a lazy dask array of bf16, each ``block`` (rows, cols; an int for both) of the
    output one tgrad matmul over the whole K. ``x``: (M, K), ``y``: (K, N), numpy or dask.

    Raises ``ShapeMismatchError`` (a ValueError) when the operands are not 2-D or K differs, and
    ValueError for a bad ``block``; tgrad's own errors (dtype, ...) surface when a block computes.
    """
    bm, bn = _sizes(block)
    a, b = _asarray(x), _asarray(y)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise by_code["shape_mismatch"](
            f"tgrad.dask.matmul: expected (M, K) @ (K, N), got {a.shape} @ {b.shape}")
    if any(d != d for d in (*a.shape, *b.shape)):  # NaN: dask does not know a chunk's extent
        raise by_code["shape_mismatch"](
            f"tgrad.dask.matmul: unknown extents {a.shape} @ {b.shape}; call compute_chunk_sizes() first")
    m, k, n = int(a.shape[0]), int(a.shape[1]), int(b.shape[1])
    # Row panels of x and column panels of y, each with the whole K: K is never split.
    a = _rechunk(a, (bm, max(k, 1)))
    b = _rechunk(b, (max(k, 1), bn))
    out = _blockwise(
        _block_matmul, "ij", a, "ik", b, "kj",
        dtype=np.dtype(ml_dtypes.bfloat16), concatenate=True,
        meta=np.empty((0, 0), dtype=ml_dtypes.bfloat16))
    assert out.shape == (m, n)
    return out
