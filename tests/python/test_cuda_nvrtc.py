"""The CUDA backend's compiler path through the real NVRTC (no driver, no GPU): rendered kernels
compile to a CUBIN for the architectures the backend targets, exactly as cuda.c builds them
(tgrad_debug_cuda_compile shares its code: --fmad=false, no fast math), and a kernel NVRTC rejects
is KernelCompileFailedError carrying NVRTC's log. Marked `cuda`: runs in `nox -s cuda`, where a
missing NVRTC fails instead of skipping."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad import render as R
from tgrad._ffi import ffi, lib

sys.path.insert(0, os.path.dirname(__file__))
import cuda_tools  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(sys.platform == "darwin", reason="the CUDA backend is not built on macOS")]


@pytest.fixture(scope="module")
def nvrtc() -> str:
    path = cuda_tools.nvrtc_library()
    # The library opens NVRTC once per process, on first use: name this one unless tgrad's import
    # already named the wheel's (bindings/python/tgrad/_ffi.py).
    os.environ.setdefault("TGRAD_NVRTC", path)
    return path


def _compile(source: str, sm: int) -> int:
    size = ffi.new("int64_t *")
    errors._check(lib.tgrad_debug_cuda_compile(source.encode(), sm, size))
    return int(size[0])


def _operands(m: int, k: int, n: int) -> tuple[tgrad.Tensor, tgrad.Tensor]:
    rng = np.random.default_rng(0)
    return (tgrad.Tensor.from_numpy(rng.standard_normal((m, k)).astype(np.float32)),
            tgrad.Tensor.from_numpy(rng.standard_normal((k, n)).astype(np.float32)))


@pytest.mark.parametrize("route", ["naive", "tiled", "tc"])
@pytest.mark.parametrize("sm", [80, 90])
def test_rendered_matmuls_compile_to_a_cubin(nvrtc: str, route: str, sm: int) -> None:
    a, b = _operands(33, 65, 97)
    with a, b:
        kernel = R.render_matmul(a.T.T, b, route, "cuda")
        assert f'extern "C" __global__ void {kernel.name}(' in kernel.source
        assert _compile(kernel.source, sm) > 1000


def test_the_tc_route_needs_sm_80_which_is_why_the_backend_chooses_it_from_there(nvrtc: str) -> None:
    a, b = _operands(64, 64, 64)
    with a, b:
        source = R.render_matmul(a, b, "tc", "cuda").source
    assert _compile(source, 80) > 0
    with pytest.raises(errors.KernelCompileFailedError, match="requires .target sm_80 or higher"):
        _compile(source, 75)


def test_a_copy_and_every_step_of_a_graph_with_elementwise_ops_compile(nvrtc: str) -> None:
    a, b = _operands(16, 24, 8)
    bias = tgrad.Tensor.from_numpy(np.ones((16, 8), np.float32))
    with a, b, bias, a @ b as c, c.gelu() as g, g + bias as out:
        assert _compile(R.render_copy(a.T, "cuda").source, 90) > 0
        for step in (0, -1):  # the matmul (perhaps with ops fused into it) and the last step
            assert _compile(R.render_tensor(out, lang="cuda", step=step).source, 90) > 0


def test_a_kernel_nvrtc_rejects_is_kernel_compile_failed_with_nvrtcs_log(nvrtc: str) -> None:
    a, b = _operands(8, 8, 8)
    with a, b:
        source = R.render_matmul(a, b, "tiled", "cuda").source.replace("__global__", "__global__ tgrad_not_a_type", 1)
    with pytest.raises(errors.KernelCompileFailedError) as caught:
        _compile(source, 90)
    message = str(caught.value)
    assert "NVRTC failed to compile" in message and "NVRTC_ERROR_COMPILATION" in message, message
    assert "error" in message and "tgrad_not_a_type" in message, message


def test_an_architecture_nvrtc_does_not_know_is_refused(nvrtc: str) -> None:
    with pytest.raises(errors.BackendUnavailableError, match="NVRTC refuses --gpu-architecture=sm_11"):
        _compile('extern "C" __global__ void k() {}', 11)
    with pytest.raises(errors.InvalidArgumentError):
        _compile('extern "C" __global__ void k() {}', 5)
