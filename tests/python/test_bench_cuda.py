"""`python -m tgrad bench --device cuda` refuses in one line, with a non-zero exit, where it cannot
run: no usable CUDA backend (this machine: no driver), or torch without CUDA (the fake driver of
tests/c/fake_cuda.c makes the backend usable, torch here is CPU-only). The timed run needs a GPU
(docs/cuda.md says how to run it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "darwin", reason="the CUDA backend is not built on macOS")


def _bench(**env: str) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    full.update(env)
    return subprocess.run([sys.executable, "-m", "tgrad", "bench", "--device", "cuda", "--shape", "64x64x64"],
                          capture_output=True, text=True, timeout=120, env=full)


def test_without_a_cuda_backend_the_bench_refuses_in_one_line() -> None:
    proc = _bench(TGRAD_CUDA_DRIVER="/nonexistent/libcuda.so.1")
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("python -m tgrad bench: error: --device cuda: the cuda backend is unavailable: "
                                  "no NVIDIA driver (/nonexistent/libcuda.so.1"), proc.stderr


def test_without_torch_cuda_the_bench_refuses_in_one_line(fake_cuda: str) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():  # pragma: no cover - a machine with a GPU
        pytest.skip("torch has CUDA here")
    proc = _bench(TGRAD_CUDA_DRIVER=fake_cuda, TGRAD_NVRTC=fake_cuda)
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "--device cuda: torch " in proc.stderr and "has no usable CUDA device" in proc.stderr, proc.stderr
