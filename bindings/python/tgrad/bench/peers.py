"""The peers tgrad is timed against and their timed regions: numpy float32, torch bf16,
ml_dtypes bf16 and tinygrad bf16, each on the same inputs with the same thread count, each
optional (a peer that does not import or cannot run is named, not timed)."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from .shapes import ML_DTYPES_LIMIT_MACS, TINYGRAD_LIMIT_MACS
from .timing import _Timed

PEER_LABELS = {
    "tgrad": "tgrad bf16",
    "tgrad_1t": "tgrad 1 thread",
    "numpy_f32": "numpy f32",
    "torch_bf16": "torch bf16",
    "ml_dtypes_bf16": "ml_dtypes bf16",
    "tinygrad_bf16": "tinygrad bf16",
}
#: tgrad itself at one thread, timed (with T > 1) and reported like a peer: its ratio is
#: (time at 1 thread) / (time at T threads), > 1 when the extra threads pay (issue 23).
ONE_THREAD = "tgrad_1t"
#: Peers timed in a phase of their own after the others, each paired with tgrad samples of that
#: phase: a tinygrad call is milliseconds of Python and waits, after which every region ran
#: slower even with its untimed call first (tgrad 64^3 3.5 -> 5.1 us, torch 127x255x511 629 ->
#: 535 GFLOP/s), and its seconds per call would have cut every region's repetitions to the minimum.
SEPARATE_PEERS = ("tinygrad_bf16",)
#: tinygrad is timed on its CPU device (the anchors of docs/performance.md are tinygrad CPU), with its default
#: renderer where that runs a bf16 matmul, else with its x86 renderer (which needs no compiler):
#: the default one compiles C with clang, and clang before 15 has no __bf16 on x86. A DEV set in
#: the environment is tinygrad's own choice and is left as it is.
TINYGRAD_TARGETS = ("CPU", "CPU:X86")
_TINYGRAD: tuple[Any, str | None, str] | None = None  # (module or None, device, note), once
_BLAS_LIMITS: Any = None  # keeps threadpoolctl's limit alive for the process


def _torch() -> Any:
    """torch, or None when it is not importable."""
    try:
        # torch ships py.typed where it is installed; the module is handled as Any here.
        import torch  # type: ignore[import-not-found, unused-ignore]
    except Exception:  # ImportError, or a broken install
        return None
    return torch


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return None


class _QuietStderr:
    """File descriptor 2 to /dev/null for a while: tinygrad's compiler subprocess writes there."""

    def __enter__(self) -> None:
        sys.stderr.flush()
        self._saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)


def _tinygrad_check(tinygrad: Any, device: str | None) -> None:
    """A 5x7x3 bf16 matmul as the timed region runs one (bf16 operands realized, then @)."""
    with _QuietStderr():
        tt, bf16 = tinygrad.Tensor, tinygrad.dtypes.bfloat16
        x = tt(np.full((5, 7), 1.5, np.float32), device=device).cast(bf16).realize()
        y = tt(np.full((7, 3), -2.0, np.float32), device=device).cast(bf16).realize()
        got = (x @ y).realize().float().numpy()
    if not np.array_equal(got, np.full((5, 3), -21.0, np.float32)):
        raise RuntimeError(f"a 5x7x3 check gave {got.ravel()[:3]}")


def _why(exc: Exception) -> str:
    """An exception in one line; a compiler subprocess named, not its argv."""
    cmd = getattr(exc, "cmd", None)
    if isinstance(cmd, (list, tuple)) and cmd:
        status = getattr(exc, "returncode", "?")
        return f"{os.path.basename(str(cmd[0]))} exited with status {status}"
    return (str(exc).splitlines() or [""])[0][:120]


def _tinygrad_setup(threads: int) -> tuple[Any, str | None, str]:
    try:
        import tinygrad  # type: ignore[import-not-found, unused-ignore]
    except Exception:
        return None, None, "tinygrad not importable"
    try:
        from tinygrad.helpers import (  # type: ignore[import-not-found, unused-ignore]
            DEV, NUM_CPU_THREADS)
    except Exception as exc:
        return None, None, (f"tinygrad {_version('tinygrad') or '?'} lacks the settings the "
                            f"bench uses (DEV, NUM_CPU_THREADS; written for 0.14): {exc}")
    NUM_CPU_THREADS.value = threads
    env_dev = os.environ.get("DEV")
    targets: tuple[str | None, ...] = (None,) if env_dev else TINYGRAD_TARGETS
    failed: list[str] = []
    for target in targets:
        if target is not None:
            DEV.value = target
        device = None if target is None else target.split(":")[0]
        try:
            _tinygrad_check(tinygrad, device)
        except Exception as exc:
            failed.append(f"{target or env_dev}: {type(exc).__name__}: {_why(exc)}")
            continue
        where = f"DEV={env_dev} (from the environment)" if target is None else f"DEV={target}"
        return tinygrad, device, where + (f" (default renderer failed: {failed[0]})"
                                          if failed else "")
    return None, None, "tinygrad cannot run a bf16 matmul here: " + "; ".join(failed)


def _tinygrad(threads: int) -> tuple[Any, str | None, str]:
    """tinygrad set up for the bench: (the module or None, the device to put tensors on, a note:
    where it runs, or why it does not). Decided once per process: a 5x7x3 bf16 matmul must give
    the right values on the target before any shape uses it."""
    global _TINYGRAD
    if _TINYGRAD is None:
        _TINYGRAD = _tinygrad_setup(threads)
    return _TINYGRAD


def _set_peer_threads(threads: int) -> dict[str, str]:
    """Give every peer `threads` threads where it can be set; report what each one uses."""
    global _BLAS_LIMITS
    info = {"ml_dtypes_bf16": "1 (scalar loop)"}
    tinygrad, _, note = _tinygrad(threads)
    if tinygrad is not None:
        info["tinygrad_bf16"] = f"{threads} (NUM_CPU_THREADS; {note})"
    try:
        # No stubs or py.typed: untyped where installed, missing where not.
        import threadpoolctl  # type: ignore[import-untyped, import-not-found, unused-ignore]

        _BLAS_LIMITS = threadpoolctl.threadpool_limits(limits=threads)
        blas = [p for p in threadpoolctl.threadpool_info() if p.get("user_api") == "blas"]
        info["numpy_f32"] = ",".join(str(p.get("num_threads")) for p in blas) or str(threads)
    except ImportError:
        info["numpy_f32"] = "default (threadpoolctl not installed)"
    torch = _torch()
    if torch is not None:
        torch.set_num_threads(threads)
        info["torch_bf16"] = str(torch.get_num_threads())
    return info


def peer_regions(a_bits: np.ndarray, b_bits: np.ndarray, threads: int,
                 skipped: dict[str, str]) -> list[_Timed]:
    """The peers' timed regions on the inputs' bf16 bits (a @ b, output in host memory); the
    peers left out go into `skipped` with the reason."""
    from .. import _conformance

    to_f32 = _conformance.module("oracle").bf16_bits_to_f32
    macs = a_bits.shape[0] * a_bits.shape[1] * b_bits.shape[1]
    a32 = np.ascontiguousarray(to_f32(a_bits))
    b32 = np.ascontiguousarray(to_f32(b_bits))
    timed = [_Timed("numpy_f32", lambda: a32 @ b32)]
    torch = _torch()
    if torch is None:
        skipped["torch_bf16"] = "torch not importable"
    else:
        at = torch.from_numpy(a_bits.view(np.int16)).view(torch.bfloat16)
        bt = torch.from_numpy(b_bits.view(np.int16)).view(torch.bfloat16)
        timed.append(_Timed("torch_bf16", lambda: torch.matmul(at, bt)))
    if macs <= ML_DTYPES_LIMIT_MACS:
        import ml_dtypes

        a16, b16 = a_bits.view(ml_dtypes.bfloat16), b_bits.view(ml_dtypes.bfloat16)
        timed.append(_Timed("ml_dtypes_bf16", lambda: np.matmul(a16, b16)))
    else:
        skipped["ml_dtypes_bf16"] = "above its size limit (a scalar loop)"
    timed += _tinygrad_region(a32, b32, macs, threads, skipped)
    return timed


def _tinygrad_region(a32: np.ndarray, b32: np.ndarray, macs: int, threads: int,
                     skipped: dict[str, str]) -> list[_Timed]:
    tinygrad, device, note = _tinygrad(threads)
    if tinygrad is None:
        skipped["tinygrad_bf16"] = note
        return []
    if macs > TINYGRAD_LIMIT_MACS:
        skipped["tinygrad_bf16"] = "above its size limit (too slow)"
        return []
    try:
        tt, dtypes = tinygrad.Tensor, tinygrad.dtypes
        ag = tt(a32, device=device).cast(dtypes.bfloat16).realize()
        bg = tt(b32, device=device).cast(dtypes.bfloat16).realize()
    except Exception as exc:
        skipped["tinygrad_bf16"] = f"{type(exc).__name__}: {exc}"
        return []
    return [_Timed("tinygrad_bf16", lambda: (ag @ bg).realize())]
