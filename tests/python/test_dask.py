"""tgrad.dask.matmul: tgrad as the per-block kernel of a dask.array blocked matmul, on a local
`distributed` cluster of 2 worker processes, bit-identical to one tgrad matmul on this machine
(blocks split M and N only; docs/interop.md). Skipped only where dask/distributed are missing."""

from __future__ import annotations

import os
from typing import Any, Iterator

import ml_dtypes
import numpy as np
import pytest

pytestmark = pytest.mark.interop
da = pytest.importorskip("dask.array", reason="dask is not installed (extra tgrad[dask])")
distributed = pytest.importorskip("distributed", reason="distributed is not installed (extra tgrad[dask])")

import tgrad  # noqa: E402
import tgrad.dask  # noqa: E402
from tgrad import Tensor  # noqa: E402


def _operands(m: int, k: int, n: int, seed: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
    y = rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
    return x, y


def _one_machine(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (Tensor.from_numpy(x) @ Tensor.from_numpy(y)).numpy()


def _bits(a: np.ndarray) -> np.ndarray:
    assert a.dtype == np.dtype(ml_dtypes.bfloat16)
    return np.ascontiguousarray(a).view(np.uint16)


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    # Worker processes inherit this environment (TGRAD_LIB, PYTHONPATH) and import tgrad themselves.
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as c:
        yield c


def test_cluster_result_is_bit_identical_to_one_machine(client: Any) -> None:
    # Ragged blocks on both sides (300 = 128+128+44, 200 = 96+96+8) and an odd K.
    x, y = _operands(300, 257, 200)
    z = tgrad.dask.matmul(x, y, block=(128, 96))
    assert z.chunks == ((128, 128, 44), (96, 96, 8))
    assert z.dtype == np.dtype(ml_dtypes.bfloat16)
    z = client.persist(z)
    distributed.wait(z)
    # Every block was computed and is held in the worker processes, not in this one.
    workers = client.run(os.getpid)
    assert len(workers) == 2 and os.getpid() not in workers.values()
    held = client.who_has(z)
    assert len(held) == 9 and all(addrs and set(addrs) <= set(workers) for addrs in held.values())
    got = client.compute(z).result()
    np.testing.assert_array_equal(_bits(got), _bits(_one_machine(x, y)))


def test_dask_operands_with_k_split_chunks_are_regrouped_to_whole_k(client: Any) -> None:
    # The inputs arrive chunked along K too: matmul regroups K, so the bytes still match.
    x, y = _operands(96, 130, 70, seed=7)
    dx, dy = da.from_array(x, chunks=(40, 50)), da.from_array(y, chunks=(50, 30))
    z = tgrad.dask.matmul(dx, dy, block=32)
    assert z.chunks == ((32, 32, 32), (32, 32, 6))
    got = z.compute()  # through the cluster: the client is the default scheduler
    np.testing.assert_array_equal(_bits(got), _bits(_one_machine(x, y)))


def test_float32_operands_round_per_element_like_from_numpy() -> None:
    rng = np.random.default_rng(8)
    x = rng.standard_normal((33, 17), dtype=np.float32)
    y = rng.standard_normal((17, 21), dtype=np.float32)
    got = tgrad.dask.matmul(x, y, block=(8, 16)).compute(scheduler="sync")
    np.testing.assert_array_equal(_bits(got), _bits(_one_machine(x, y)))


def test_shapes_and_blocks_are_checked_before_anything_runs() -> None:
    x, y = _operands(4, 5, 6)
    with pytest.raises(tgrad.errors.ShapeMismatchError):
        tgrad.dask.matmul(x, y.T)
    with pytest.raises(tgrad.errors.ShapeMismatchError):
        tgrad.dask.matmul(x[0], y)
    for bad in (0, -1, (4, 0), (2.5, 4), True):
        with pytest.raises(ValueError, match="block"):
            tgrad.dask.matmul(x, y, block=bad)  # type: ignore[arg-type]


def test_unknown_extents_are_refused_before_any_block_runs() -> None:
    # a boolean mask leaves dask not knowing how many rows there are (NaN extents)
    x = da.from_array(np.ones((6, 4), np.float32), chunks=3)
    masked = x[x[:, 0] > 0]
    with pytest.raises(tgrad.errors.ShapeMismatchError, match="compute_chunk_sizes"):
        tgrad.dask.matmul(masked, np.ones((4, 5), np.float32))
