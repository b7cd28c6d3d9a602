"""Device selection: names, `.device`, `.to()`, and refusals for devices this machine cannot use
(typed, with the backend's reason, before anything is allocated). End-to-end GPU runs are in
test_opencl.py (PoCL in CI)."""

from __future__ import annotations

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad._ffi import ffi, lib


def test_a_host_tensor_lives_on_the_cpu_and_to_cpu_is_the_same_view() -> None:
    t = tgrad.Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3)).T
    u = t.to("cpu")
    assert t.device == u.device == "cpu"
    assert u.shares_buffer(t) and u.strides == t.strides


@pytest.mark.parametrize("device", ["metal", "opencl", "cuda"])
def test_an_unusable_device_is_refused_with_its_reason_before_any_allocation(device: str) -> None:
    available = {b.name: b.available for b in tgrad.backends()}
    if available[device]:
        pytest.skip(f"{device} is usable on this machine: covered by its own tests")
    before = (tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes())
    with pytest.raises(errors.BackendUnavailableError, match=device):
        tgrad.Tensor.from_numpy(np.ones((2, 2), np.float32), device=device)
    assert (tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes()) == before
    host = tgrad.Tensor.from_numpy(np.ones((2, 2), np.float32))
    with pytest.raises(errors.BackendUnavailableError):
        host.to(device)


def test_unknown_device_names_are_refused() -> None:
    with pytest.raises(errors.InvalidArgumentError, match="unknown device 'tpu'"):
        tgrad.Tensor.from_numpy(np.ones(2, np.float32), device="tpu")
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.Tensor.from_numpy(np.ones(2, np.float32)).to(3)  # type: ignore[arg-type]


def test_device_numbers_match_the_backend_list() -> None:
    out = ffi.new("int32_t *")
    for index, backend in enumerate(tgrad.backends()):
        assert lib.tgrad_device_by_name(backend.name.encode(), out) == 0 and out[0] == index


def test_the_device_route_can_be_forced_and_reset() -> None:
    assert lib.tgrad_set_device_route(lib.TGRAD_ROUTE_NAIVE) == 0
    assert lib.tgrad_set_device_route(lib.TGRAD_ROUTE_COPY) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert lib.tgrad_set_device_route(99) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert lib.tgrad_set_device_route(0) == 0


def test_set_device_route_from_python() -> None:
    for name in ("naive", "tiled", "tc", "auto"):
        tgrad.set_device_route(name)
    with pytest.raises(errors.InvalidArgumentError, match="expected one of 'auto', 'naive', 'tiled', 'tc', got 'copy'"):
        tgrad.set_device_route("copy")
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.set_device_route(1)  # type: ignore[arg-type]
