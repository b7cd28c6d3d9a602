"""Where the CUDA toolkit's compilers are, for the tests marked `cuda` (`nox -s cuda`).

Machines of CI's kind carry nvcc and ptxas (no GPU, no driver); NVRTC comes from the `cuda`
extra's wheel (nvidia-cuda-nvrtc). A missing tool skips the test, or fails it under
TGRAD_REQUIRE_CUDA_TOOLS=1 (set by the session), so CI cannot pass by skipping."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CANDIDATE_DIRS = ("/usr/local/cuda/bin", "/usr/local/bin", "/usr/bin")


def _missing(what: str) -> None:
    if os.environ.get("TGRAD_REQUIRE_CUDA_TOOLS") == "1":
        pytest.fail(f"TGRAD_REQUIRE_CUDA_TOOLS=1, but {what}")
    pytest.skip(what)


def tool(name: str) -> str:
    """The path of nvcc or ptxas: PATH first, then the toolkit's usual places."""
    found = shutil.which(name)
    for d in CANDIDATE_DIRS:
        if found:
            break
        if (Path(d) / name).exists():
            found = str(Path(d) / name)
    if not found:
        _missing(f"{name} is not installed (the CUDA toolkit)")
    assert found is not None
    return found


def nvrtc_library() -> str:
    """The path of libnvrtc.so.* from the nvidia-cuda-nvrtc wheel (or TGRAD_NVRTC): where the
    package itself finds it (tgrad._ffi), so the tests compile with the NVRTC the backend loads."""
    env = os.environ.get("TGRAD_NVRTC")
    if env and Path(env).exists():
        return env
    from tgrad._ffi import _nvrtc_from_wheel  # noqa: PLC0415

    found = _nvrtc_from_wheel()
    if found:
        return found
    _missing("NVRTC is not installed (pip install 'tgrad[cuda]', the nvidia-cuda-nvrtc wheel)")
    raise AssertionError("unreachable")
