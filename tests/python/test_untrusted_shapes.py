"""Readers of external bytes check that numpy can build what they are about to build (issue 33,
cases 3, 4 and DLPack): a shape numpy refuses ([2**62, 0] of 2-byte elements, 70 axes, an
extent past 2**63) is the reader's typed tgrad error, raised before any numpy call, never
numpy's raw ValueError. And tgrad.trace on a return value that contains itself (case 6)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("safetensors")

import dlpack_forge as forge  # noqa: E402
import tgrad  # noqa: E402
from tgrad import _buildable, errors  # noqa: E402
from tgrad import safetensors as tst  # noqa: E402
from tgrad.nn import Linear  # noqa: E402

UNBUILDABLE = [[2**62, 0], [0, 2**62], [2**40, 0, 2**40], [2**31, 2**31, 0], [0, 2**63 - 1]]


def numpy_refuses(shape: list[int], dtype: Any) -> bool:
    try:
        np.empty(shape, dtype)
    except ValueError:
        return True
    except MemoryError:
        return False
    return False


@pytest.mark.parametrize("shape", UNBUILDABLE + [[2**61, 0], [2**62 - 1, 0], [0] * 64, [0] * 65, [1] * 65])
@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_the_buildable_rule_agrees_with_numpy(shape: list[int], itemsize: int) -> None:
    assert (_buildable.problem(shape, itemsize) is not None) == numpy_refuses(shape, f"u{itemsize}")


def safetensors_file(path: Path, shape: list[int], dtype: str = "BF16", name: str = "fc.weight",
                     extra: dict[str, Any] | None = None) -> Path:
    header = {name: {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]}, **(extra or {})}
    body = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body)
    return path


@pytest.mark.parametrize("shape", [[2**62, 0], [0, 2**62], [2**31, 2**31, 0]])
def test_a_safetensors_weight_numpy_cannot_build_is_a_typed_error(tmp_path: Path, shape: list[int]) -> None:
    path = safetensors_file(tmp_path / "w.safetensors", shape)
    ckpt = tst.open(path)  # the header itself is well formed: its schema opens
    assert ckpt.schema["fc.weight"].shape == tuple(shape)
    with pytest.raises(errors.SizeOverflowError, match="fc.weight"):
        ckpt.load()
    with pytest.raises(errors.SizeOverflowError):
        ckpt["fc.weight"]  # noqa: B018
    if len(shape) == 2:
        with pytest.raises(errors.SizeOverflowError):
            Linear.from_checkpoint(path, "fc")


def test_an_empty_weight_numpy_can_build_still_loads(tmp_path: Path) -> None:
    path = safetensors_file(tmp_path / "w.safetensors", [3, 0])
    layer = Linear.from_checkpoint(path, "fc")
    assert layer.weight.shape == (3, 0)


@pytest.mark.parametrize("shape", [[0, 2**70], [0] * 70, [2**40, 0, 2**40], [2**62, 0], [0, 2**63]])
def test_trace_from_json_refuses_shapes_numpy_cannot_build(shape: list[int]) -> None:
    a = tgrad.Tensor.from_numpy(np.ones((2, 2), np.float32))
    doc = json.loads(tgrad.trace(lambda x: x + 1, a).to_json(payloads=True))
    doc["ops"][0]["shape"] = shape
    doc["ops"][0]["payload"]["data"] = ""
    with pytest.raises(errors.InvalidArgumentError, match="Trace.from_json: op 0"):
        tgrad.Trace.from_json(json.dumps(doc))


@pytest.mark.parametrize("shape", [[2**62, 0], [0, 2**62], [2**40, 0, 2**40]])
@pytest.mark.parametrize("dtype", [(forge.KDL_BFLOAT, 16, 1), (forge.KDL_FLOAT, 32, 1)])
def test_a_dlpack_shape_numpy_cannot_build_is_a_typed_error(shape: list[int], dtype: tuple[int, int, int]) -> None:
    forged = forge.Forged(shape=shape, dtype=dtype)
    with pytest.raises(errors.SizeOverflowError):
        tgrad.from_dlpack(forge.Producer(forged, forge.store_for(forged, 0)))


@pytest.mark.parametrize("shape", [(2**62, 0), (0,) * 70, (2**40, 0, 2**40)])
def test_a_pickle_with_a_shape_numpy_cannot_build_is_a_typed_error(shape: tuple[int, ...]) -> None:
    from tgrad.tensor import _unpickle

    with pytest.raises(errors.InvalidArgumentError, match="unpickle"):
        _unpickle(b"", shape, "cpu")


# ---- case 6: a return value that contains itself ----------------------------------------------
def looping_list(x: tgrad.Tensor) -> Any:
    out: list[Any] = [x + 1]
    out.append(out)
    return out


def looping_dict(x: tgrad.Tensor) -> Any:
    out: dict[str, Any] = {"y": x * 2}
    out["again"] = [out]
    return out


@pytest.mark.parametrize("fn", [looping_list, looping_dict])
def test_trace_of_a_self_referencing_output_is_a_typed_error(fn: Any) -> None:
    a = tgrad.Tensor.from_numpy(np.ones((2, 2), np.float32))
    with pytest.raises(errors.InvalidArgumentError, match="contains itself"):
        tgrad.trace(fn, a)


def test_shared_and_deeply_nested_outputs_are_no_cycle() -> None:
    a = tgrad.Tensor.from_numpy(np.ones((2, 2), np.float32))

    def shared(x: tgrad.Tensor) -> Any:
        y = [x + 1]
        return [y, y]  # one list twice, side by side: not a cycle

    assert len(tgrad.trace(shared, a).outputs) == 2

    def deep(x: tgrad.Tensor) -> Any:
        out: Any = x.relu()
        for _ in range(5000):  # deeper than Python's recursion limit
            out = [out]
        return out

    assert len(tgrad.trace(deep, a).outputs) == 1
