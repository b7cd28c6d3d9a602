"""Shared fixtures for the Python binding tests.

Every test runs under a leak check: the live tensor and buffer counts of libtgrad must be back to
their starting values once the test's objects are collected.

Tiers (markers registered in pyproject.toml; each nox session selects one, so every test runs in
exactly one session): unmarked tests are the core suite (`nox -s tests`); `interop` tests need a
heavy optional peer such as torch or dask (`nox -s interop`, which sets TGRAD_REQUIRE_INTEROP=1 so
that such a test skipping fails instead); `slow` tests are long sweeps and subprocess-heavy CLI runs
(`nox -s slow`); `typecheck` tests run mypy (`nox -s typecheck`).
"""

from __future__ import annotations

import gc
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Generator, Iterator
from typing import Any
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
# No kernel images on disk between tests (kernel_cache.h): a fake compiler's failure mode must not
# be answered from an image an earlier test stored. The cache's own test names its directory.
os.environ.setdefault("TGRAD_KERNEL_CACHE", "0")
if importlib.util.find_spec("tgrad") is None:
    # Not installed (nox installs it): run against the source tree and the meson build's library
    # unless TGRAD_LIB says otherwise.
    for path in (ROOT / "bindings" / "python", ROOT):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    _BUILT = ROOT / "build" / "libtgrad" / "libtgrad.so"
    if not os.environ.get("TGRAD_LIB") and _BUILT.exists():
        os.environ["TGRAD_LIB"] = str(_BUILT)


def _live() -> tuple[int, int, int] | None:
    """Live (tensors, buffers, bytes); None when libtgrad cannot be loaded (tests that need it
    fail on their own import, and library-independent tests such as the oracle's still run)."""
    try:
        import tgrad
    except ImportError:
        return None
    gc.collect()
    return tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes()


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    if report.skipped and os.environ.get("TGRAD_REQUIRE_INTEROP") == "1" and item.get_closest_marker("interop"):
        # `nox -s interop` installs every peer: a skip there means one went missing, not a pass.
        report.outcome = "failed"
        report.longrepr = f"TGRAD_REQUIRE_INTEROP=1, but this interop test skipped: {report.longrepr}"
    return report


def pytest_collection_finish(session: pytest.Session) -> None:
    """Moves everything alive after collection (the imported modules: numpy, hypothesis and, in
    `nox -s interop`, torch's hundreds of thousands of objects) out of the collector's reach, so
    the two gc.collect() calls of every test's leak check scan only what tests create: with torch
    imported, a full collection takes about 0.1 s, twice for each of some 1,800 tests. The leak
    check loses nothing: a tensor a test leaves in a reference cycle is a new object, still
    collected, and one left reachable is still counted alive."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test that leaves tensor handles, buffers or buffer bytes alive.

    A test that already failed is not also reported as leaking: its traceback holds its tensors.
    """
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        # pytest keeps the previous failure here (for post-mortem debugging), tensors included.
        if hasattr(sys, name):
            delattr(sys, name)
    before = _live()
    yield
    if request.node.stash.get(_CALL_FAILED, False):
        return
    after = _live()
    assert after == before, (
        f"leak: (live tensors, buffers, bytes) went from {before} to {after}"
    )


def _cpu_isa_setting() -> str | None:
    """What tgrad.set_cpu_isa takes to restore the CPU variant choice now in force (the forced
    name, or "auto"); None without libtgrad."""
    try:
        import tgrad
    except ImportError:
        return None
    return tgrad._cpu_isa_setting()


@pytest.fixture(autouse=True)
def keeps_the_cpu_variant() -> Iterator[None]:
    """Fails a test that leaves another CPU variant choice in force than it found: `nox -s
    tests` runs the core tier again with each variant forced (TGRAD_CPU_ISA), and a test that
    ended with set_cpu_isa("auto") would quietly run the rest of its worker's tests on the
    automatic choice. Restore with tgrad.set_cpu_isa(tgrad._cpu_isa_setting() read before)."""
    before = _cpu_isa_setting()
    yield
    after = _cpu_isa_setting()
    if after != before:
        import tgrad

        tgrad.set_cpu_isa(before or "auto")
        pytest.fail(f"the test left the CPU variant choice {after!r}, it found {before!r}")


@pytest.fixture(autouse=True)
def keeps_the_matmul_order() -> Iterator[None]:
    """Fails a test that leaves another matmul order in force than it found (the default, block32,
    unless the run set another): the rest of its worker's tests would quietly run in it."""
    try:
        import tgrad
    except ImportError:
        yield
        return
    before = tgrad.get_matmul_order()
    yield
    after = tgrad.get_matmul_order()
    if after != before:
        tgrad.set_matmul_order(before)
        pytest.fail(f"the test left the matmul order {after!r}, it found {before!r}")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240601)


@pytest.fixture
def bf16_bits() -> Callable[..., np.ndarray]:
    """Random finite bf16 bit patterns of a shape (normal values, seeded)."""
    import ml_dtypes

    gen = np.random.default_rng(7)

    def make(*shape: int) -> np.ndarray:
        values = gen.standard_normal(shape).astype(ml_dtypes.bfloat16)
        return np.ascontiguousarray(values).view(np.uint16)

    return make


@pytest.fixture
def opencl_device() -> str:
    """The OpenCL device libtgrad uses here ("platform / device"). Skips where none is usable,
    but fails under TGRAD_REQUIRE_OPENCL=1 (CI installs PoCL and sets it: a backend that went
    missing must not pass as skipped)."""
    import tgrad

    row = next(b for b in tgrad.backends() if b.name == "opencl")
    if row.built and row.available:
        return row.device
    reason = f"the opencl backend is unavailable: {row.device}"
    if os.environ.get("TGRAD_REQUIRE_OPENCL") == "1":
        pytest.fail(f"TGRAD_REQUIRE_OPENCL=1, but {reason}")
    pytest.skip(reason)


@pytest.fixture
def cuda_device() -> str:
    """The CUDA device libtgrad uses here ("name (sm_XY, NVRTC x.y)"). Skips where none is usable
    (no GPU or driver: every machine of this project's CI), but fails under TGRAD_REQUIRE_CUDA=1,
    for a run on a GPU that must not pass as skipped (docs/cuda.md)."""
    import tgrad

    row = next(b for b in tgrad.backends() if b.name == "cuda")
    if row.built and row.available:
        return row.device
    reason = f"the cuda backend is unavailable: {row.device}"
    if os.environ.get("TGRAD_REQUIRE_CUDA") == "1":
        pytest.fail(f"TGRAD_REQUIRE_CUDA=1, but {reason}")
    pytest.skip(reason)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Says, at the end of the run, which backends' tests were skipped and why: a machine without
    an OpenCL driver skips the OpenCL suite, and that must be visible in the output rather than
    hidden in the skip count (CI sets TGRAD_REQUIRE_OPENCL=1, which fails them instead)."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        if "backend is unavailable" in reason:
            reason = reason.removeprefix("Skipped: ")
            reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in sorted(reasons.items()):
        require = "TGRAD_REQUIRE_CUDA" if reason.startswith("the cuda backend") else "TGRAD_REQUIRE_OPENCL"
        terminalreporter.write_line(
            f"tgrad: {count} test(s) skipped because {reason} "
            f"(set {require}=1 to fail them instead)", yellow=True)


_FAKE_CUDA_SOURCE = Path(__file__).resolve().parents[2] / "tests" / "c" / "fake_cuda.c"


@pytest.fixture(scope="session")
def fake_cuda(tmp_path_factory: pytest.TempPathFactory) -> str:
    """tests/c/fake_cuda.c, a fake CUDA driver and NVRTC (tests of the cuda backend without a GPU):
    meson's build beside the library under test, else compiled here with the C compiler."""
    lib = os.environ.get("TGRAD_LIB")
    if lib:
        built = Path(lib).resolve().parents[1] / "tests" / "c" / "libfake_cuda.so"
        if built.exists() and built.stat().st_mtime >= _FAKE_CUDA_SOURCE.stat().st_mtime:
            return str(built)
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc, "no C compiler to build tests/c/fake_cuda.c"
    out = tmp_path_factory.mktemp("fake_cuda") / "libfake_cuda.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(_FAKE_CUDA_SOURCE)], check=True)
    return str(out)
