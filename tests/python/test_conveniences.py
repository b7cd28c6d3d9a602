"""Python conveniences of issue 24 and the run-time side of the typed shapes of issue 22:
tolist, nbytes, size, itemsize, .mT, len(), float(), tgrad.typed, Tensor[...] at run time."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Literal

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad import Tensor, errors


def t(shape: tuple[int, ...]) -> Tensor:
    return Tensor.from_numpy(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))


def test_tolist_matches_numpy_with_exact_bf16_values() -> None:
    x = Tensor.from_numpy(np.array([[1.0, 1 / 3], [-2.5, 1e30]], np.float32))
    assert x.tolist() == x.numpy(np.float32).tolist()
    assert x.tolist()[0][1] == float(x.numpy(np.float32)[0, 1]) != 1 / 3  # rounded to bf16
    assert Tensor.from_numpy(np.array(2.0, np.float32)).tolist() == 2.0


def test_sizes_in_elements_and_bytes() -> None:
    x = t((3, 5))
    assert (x.size, x.itemsize, x.nbytes) == (15, 2, 30)
    assert x.T[1:].nbytes == 4 * 3 * 2  # the logical view's bytes
    assert t((0, 4)).nbytes == 0
    assert len(x) == 3 and len(x.T) == 5
    with pytest.raises(TypeError):
        len(Tensor.from_numpy(np.array(1.0, np.float32)))


def test_released_tensor_has_no_sizes() -> None:
    x = t((2, 2))
    x.release()
    for read in (lambda: x.itemsize, lambda: x.nbytes, lambda: x.tolist(), lambda: float(x)):
        with pytest.raises(errors.InvalidHandleError):
            read()


def test_mT_swaps_the_last_two_axes() -> None:
    x = t((2, 3, 4))
    assert x.mT.shape == (2, 4, 3)
    np.testing.assert_array_equal(x.mT.numpy(np.float32), np.swapaxes(x.numpy(np.float32), -1, -2))
    assert t((2, 3)).mT.shape == (3, 2) and x.T.shape == (4, 3, 2)
    with pytest.raises(errors.RankMismatchError, match=".mT"):
        t((4,)).mT


def test_float_of_a_one_element_tensor() -> None:
    value = float(Tensor.from_numpy(np.array([[3.0]], np.float32)))
    assert value == 3.0 and isinstance(value, float)
    exact = float(Tensor.from_numpy(np.array(0.1, np.float32)))
    assert exact == Tensor.from_numpy(np.array(0.1, np.float32)).numpy(np.float32).item()
    with pytest.raises(errors.InvalidArgumentError, match=r"one-element.*\(2, 2\)"):
        float(t((2, 2)))
    with pytest.raises(errors.InvalidArgumentError):
        float(t((0,)))


def test_shape_subscription_works_at_run_time() -> None:
    alias: Any = Tensor[Literal[32], Literal[768]]
    assert alias.__origin__ is Tensor
    assert Tensor[int, int] is not None and Tensor[()] is not None


def test_typed_checks_the_stated_shape() -> None:
    x = t((2, 3))
    assert tgrad.typed(x, 2, 3) is x
    assert tgrad.typed(x, Tensor[Literal[2], Literal[3]]) is x
    assert tgrad.typed(x, Tensor[Literal[2], int]) is x and tgrad.typed(x, Tensor[Any, Any]) is x
    assert tgrad.typed(x, Tensor) is x
    with pytest.raises(errors.ShapeMismatchError, match=r"\(3, 2\).*\(2, 3\)"):
        tgrad.typed(x, 3, 2)
    with pytest.raises(errors.ShapeMismatchError, match=r"\(\?, 4\)"):
        tgrad.typed(x, Tensor[int, Literal[4]])
    with pytest.raises(errors.RankMismatchError):
        tgrad.typed(x, 6)
    with pytest.raises(errors.RankMismatchError):
        tgrad.typed(x, Tensor[Literal[2], Literal[3], Literal[1]])
    for bad in (-1, True, 2.0):
        with pytest.raises(errors.InvalidArgumentError):
            tgrad.typed(x, bad, 3)
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.typed(np.zeros((2, 3)), 2, 3)  # type: ignore[call-overload]
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.typed(x, list)  # type: ignore[call-overload]


def test_a_non_tensor_on_the_left_of_matmul_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        np.ones((2, 2), np.float32) @ t((2, 2))  # type: ignore[operator]


def test_from_numpy_of_float16_agrees_with_from_dlpack_bit_for_bit() -> None:
    # every float16: normals, subnormals, zeros, infinities and NaNs
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(256, 256)
    by_numpy = Tensor.from_numpy(every).numpy().view(np.uint16)
    by_dlpack = tgrad.from_dlpack(every).numpy().view(np.uint16)
    np.testing.assert_array_equal(by_numpy, by_dlpack)
    finite = np.isfinite(every)
    expected = every[finite].astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)  # nearest even
    np.testing.assert_array_equal(by_numpy[finite], expected)
    assert np.isnan(Tensor.from_numpy(every).numpy(np.float32)[~finite & np.isnan(every)]).all()
    strided = every[::3, ::-2]  # any layout, as for the other dtypes
    np.testing.assert_array_equal(Tensor.from_numpy(strided).numpy().view(np.uint16), by_numpy[::3, ::-2])


def test_a_missing_checkpoint_is_also_a_file_not_found_error(tmp_path: Path) -> None:
    missing = tmp_path / "none.safetensors"
    with pytest.raises(FileNotFoundError) as info:
        tgrad.safetensors.open(missing)
    assert isinstance(info.value, errors.FileMissingError) and isinstance(info.value, LookupError)
    assert info.value.code == "file_missing" and str(missing) in str(info.value)
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is type(info.value) and str(copy) == str(info.value)


def test_a_checkpoint_is_a_context_manager(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    tgrad.safetensors.save(path, {"w": t((2, 3))})
    with tgrad.safetensors.open(path) as ckpt:
        kept = ckpt["w"]
        assert ckpt.w.shape == (2, 3)
    assert "closed" in repr(ckpt) and ckpt.schema["w"].shape == (2, 3)
    with pytest.raises(errors.InvalidHandleError, match="closed"):
        ckpt["w"]
    with pytest.raises(errors.InvalidHandleError):
        ckpt.load()
    assert kept.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]  # what was read stays the caller's
