"""The CUDA backend without a GPU: unavailable with its reason on a machine without a driver, and
its driver and compiler paths against a fake driver and NVRTC (tests/c/fake_cuda.c, loaded through
TGRAD_CUDA_DRIVER and TGRAD_NVRTC; TGRAD_FAKE_CUDA picks its behaviour). Device choice runs once
per process, so each case runs in its own. The real NVRTC compiling rendered kernels is in
test_cuda_nvrtc.py (marked `cuda`); a GPU run is docs/cuda.md's business."""

from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad._ffi import ffi, lib


pytestmark = pytest.mark.skipif(sys.platform == "darwin", reason="the CUDA backend is not built on macOS")


_PROBE = r"""
import ctypes, json, os, sys
import numpy as np
import tgrad
row = next(b for b in tgrad.backends() if b.name == "cuda")
out = {"built": row.built, "available": row.available, "device": row.device}
fake = ctypes.CDLL(os.environ["TGRAD_CUDA_DRIVER"]) if os.path.exists(os.environ.get("TGRAD_CUDA_DRIVER", "")) else None

def live():
    counts = [ctypes.c_int() for _ in range(3)]
    fake.fake_cuda_live(*[ctypes.byref(c) for c in counts])
    return [c.value for c in counts]

before = (tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes())
x = np.arange(12, dtype=np.float32).reshape(3, 4)
try:
    a = tgrad.Tensor.from_numpy(x, device="cuda")
    out["device_of_a"] = a.device
    out["round_trip"] = a.numpy().astype(np.float32).tolist() == x.tolist()
    try:
        with a @ a.T as c:
            out["route"] = c.route
            c.realize()
            out["realized"] = True
    finally:
        a.release()
except tgrad.TgradError as exc:
    out["error"], out["code"], out["message"] = type(exc).__name__, exc.code, str(exc)
from tgrad import render
try:  # a product the tc route can take: never chosen under the default precision, exact; under
      # "bounded" chosen on sm_80+; forced: refused under exact, run under bounded
    with tgrad.Tensor.from_numpy(np.ones((64, 64), np.float32), device="cuda") as s, s @ s as p:
        out["route64_exact"] = p.route
        out["plan64_exact"] = tgrad.explain(p, json=True)["steps"][0].get("plan", "")
        out["kernel64_exact"] = render.render_tensor(p, None, "cuda").route  # the kernel it would run
        with tgrad.matmul_precision("bounded"):
            out["route64"] = p.route
            out["plan64"] = tgrad.explain(p, json=True)["steps"][0].get("plan", "")
            out["kernel64"] = render.render_tensor(p, None, "cuda").route
            p.realize()
        out["route64_after"] = p.route  # realized under bounded: the route it ran
    tgrad.set_device_route("tc")
    with tgrad.Tensor.from_numpy(np.ones((64, 64), np.float32), device="cuda") as s, s @ s as p:
        out["plan_forced_exact"] = tgrad.explain(p, json=True)["steps"][0].get("plan", "")
        try:
            p.realize()
            out["forced_tc_exact"] = "ok"
        except tgrad.TgradError as exc:
            out["forced_tc_exact"] = f"{type(exc).__name__}: {exc}"
        out["pending_after_refusal"] = not p.is_realized
        with tgrad.matmul_precision("bounded"):
            p.realize()
    out["forced_tc"] = "ok"
except tgrad.TgradError as exc:
    out["forced_tc"] = f"{type(exc).__name__}: {exc}"
finally:
    tgrad.set_device_route("auto")
out["precision_after"] = tgrad.get_matmul_precision()
out["leaked"] = [tgrad.live_tensors() - before[0], tgrad.live_buffers() - before[1], tgrad.live_bytes() - before[2]]
if fake is not None and row.available:
    out["fake_live"] = live()
with tgrad.Tensor.from_numpy(np.eye(3, dtype=np.float32)) as e, e @ e as f:
    out["cpu_ok"] = bool(np.array_equal(f.numpy().astype(np.float32), np.eye(3)))
print(json.dumps(out))
"""


def _probe(**env: str) -> dict[str, object]:
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    full.pop("TGRAD_CUDA_DEVICE", None)
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, env=full)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _unavailable(out: dict[str, object], reason: str) -> None:
    assert out["built"] is True and out["available"] is False, out
    assert reason in str(out["device"]), out["device"]
    assert out["error"] == "BackendUnavailableError" and out["code"] == "backend_unavailable", out
    assert str(out["message"]).startswith("cuda: ") and reason in str(out["message"]), out["message"]
    assert out["leaked"] == [0, 0, 0] and out["cpu_ok"] is True, out


def test_cuda_is_a_listed_device_with_a_number() -> None:
    names = [b.name for b in tgrad.backends()]
    assert names.index("cuda") == 3
    row = next(b for b in tgrad.backends() if b.name == "cuda")
    assert row.built and row.device


def test_without_a_driver_the_backend_is_unavailable_with_the_reason() -> None:
    out = _probe(TGRAD_CUDA_DRIVER="/nonexistent/libcuda.so.1")
    _unavailable(out, "no NVIDIA driver (/nonexistent/libcuda.so.1: cannot open shared object file")


def test_on_this_machine_cuda_is_refused_before_anything_is_allocated() -> None:
    row = next(b for b in tgrad.backends() if b.name == "cuda")
    if row.available:  # pragma: no cover - a machine with a driver and a GPU
        pytest.skip(f"cuda is usable here: {row.device}")
    before = (tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes())
    with pytest.raises(errors.BackendUnavailableError, match="^cuda: "):
        tgrad.Tensor.from_numpy(np.ones((2, 2), np.float32), device="cuda")
    with tgrad.Tensor.from_numpy(np.ones((2, 2), np.float32)) as host, pytest.raises(errors.BackendUnavailableError):
        host.to("cuda")
    assert (tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes()) == before


def test_a_library_that_is_not_a_driver_is_refused_by_name() -> None:
    lib = os.environ.get("TGRAD_LIB", "")
    if not lib:
        pytest.skip("TGRAD_LIB is not set")
    _unavailable(_probe(TGRAD_CUDA_DRIVER=lib), "lacks cuInit")


@pytest.mark.slow  # a child process (about 1 s); the core tier keeps the no-driver and working-driver cases
def test_cuinit_failing_names_the_cuda_error(fake_cuda: str) -> None:
    _unavailable(_probe(TGRAD_CUDA_DRIVER=fake_cuda, TGRAD_FAKE_CUDA="init:100"), "cuInit: CUDA_ERROR_NO_DEVICE")


@pytest.mark.slow  # a child process (about 1 s); the core tier keeps the no-driver and working-driver cases
def test_a_driver_without_devices_is_no_cuda_device(fake_cuda: str) -> None:
    _unavailable(_probe(TGRAD_CUDA_DRIVER=fake_cuda, TGRAD_FAKE_CUDA="no-devices"), "no CUDA device")


@pytest.mark.slow  # a child process (about 1 s); the core tier keeps the no-driver and working-driver cases
def test_a_device_index_the_driver_lacks_is_refused(fake_cuda: str) -> None:
    _unavailable(_probe(TGRAD_CUDA_DRIVER=fake_cuda, TGRAD_NVRTC=fake_cuda, TGRAD_CUDA_DEVICE="1"),
                 "TGRAD_CUDA_DEVICE=1 is not a device index (the driver sees 1 device(s))")


@pytest.mark.slow  # a child process (about 1 s); the core tier keeps the no-driver and working-driver cases
def test_without_nvrtc_the_backend_says_how_to_get_it(fake_cuda: str) -> None:
    _unavailable(_probe(TGRAD_CUDA_DRIVER=fake_cuda, TGRAD_NVRTC="/nonexistent/libnvrtc.so.13"),
                 "NVRTC not found (pip install 'tgrad[cuda]'); TGRAD_NVRTC: /nonexistent/libnvrtc.so.13")


@pytest.mark.slow  # a child process (about 1 s); the core tier keeps the no-driver and working-driver cases
def test_a_device_older_than_every_nvrtc_architecture_is_refused(fake_cuda: str) -> None:
    _unavailable(_probe(TGRAD_CUDA_DRIVER=fake_cuda, TGRAD_NVRTC=fake_cuda, TGRAD_FAKE_CUDA="cc:70"),
                 "NVRTC cannot compile for sm_70 or any older architecture")


def test_on_a_working_driver_memory_round_trips_and_a_matmul_launches_without_leaks(fake_cuda: str) -> None:
    # The buffer pool off (tests/c/test_device_pool.c tests it), so that every freed tensor's
    # memory goes back to the driver at once and the fake's count of live allocations says it did.
    out = _probe(TGRAD_CUDA_DRIVER=fake_cuda, TGRAD_NVRTC=fake_cuda, TGRAD_DEVICE_POOL_BYTES="0")
    assert out["available"] is True and out["device"] == "Fake CUDA Device (sm_90, NVRTC 99.0)", out
    assert out["device_of_a"] == "cuda" and out["round_trip"] is True, out
    assert out["route"] == "cuda.naive" and out["realized"] is True, out  # three rows: naive (docs/cuda.md)
    assert "error" not in out and out["leaked"] == [0, 0, 0], out
    allocations, modules, programs = out["fake_live"]  # type: ignore[misc]
    assert allocations == 0, out  # every tensor's device memory was freed
    assert programs == 0 and modules == 2, out  # the tiled and tc kernels stay in device.c's cache


def test_with_the_pool_on_freed_buffers_stay_cached_for_reuse(fake_cuda: str) -> None:
    out = _probe(TGRAD_CUDA_DRIVER=fake_cuda, TGRAD_NVRTC=fake_cuda)
    assert out["realized"] is True and out["leaked"] == [0, 0, 0], out
    assert out["fake_live"][0] > 0, out  # type: ignore[index]  # held by the pool, not leaked (see above)


def test_tc_is_chosen_from_sm_80_and_refused_below(fake_cuda: str) -> None:
    # under the bounded precision policy (tgrad.matmul_precision); the exact default: below
    out = _probe(TGRAD_CUDA_DRIVER=fake_cuda, TGRAD_NVRTC=fake_cuda)
    assert out["route64"] == "cuda.tc" and out["forced_tc"] == "ok", out
    assert out["kernel64"] == "tc" and out["route64_after"] == "cuda.tc", out
    out = _probe(TGRAD_CUDA_DRIVER=fake_cuda, TGRAD_NVRTC=fake_cuda, TGRAD_FAKE_CUDA="cc:75")
    assert out["device"] == "Fake CUDA Device (sm_75, NVRTC 99.0)" and out["route64"] == "cuda.tiled", out
    assert out["forced_tc"] == ("RouteNotEligibleError: cuda: route tc needs matrix instructions that "
                                "Fake CUDA Device (sm_75, NVRTC 99.0) lacks"), out
    assert out["leaked"] == [0, 0, 0], out


def test_under_the_exact_default_tc_is_never_chosen_and_forcing_it_is_refused(fake_cuda: str) -> None:
    out = _probe(TGRAD_CUDA_DRIVER=fake_cuda, TGRAD_NVRTC=fake_cuda)  # sm_90: tc is eligible
    assert out["route64_exact"] == "cuda.tiled" and out["kernel64_exact"] == "tiled", out
    assert out["plan64_exact"] == "precision exact: tiled, the documented order's bytes", out
    # the bound of docs/kernels.md for CUDA at K = 64: (1 + 2^-8) gamma'_128 and 128 2^-126 + 2^-134
    assert out["plan64"] == ("precision bounded: tc, |out - s| <= 2^-8 |s| + 1.53e-05 P + 1.5e-36 "
                             "(K = 64; docs/kernels.md)"), out
    assert out["plan_forced_exact"] == ("precision exact: tc refused (a bounded route; set_matmul_precision "
                                        "bounded allows it)"), out
    assert out["forced_tc_exact"] == ('RouteNotEligibleError: cuda: route tc is bounded (docs/kernels.md) and '
                                      'the matmul precision is exact: set_matmul_precision("bounded") '
                                      '(TGRAD_MATMUL_PRECISION_BOUNDED) allows it'), out
    assert out["pending_after_refusal"] is True and out["forced_tc"] == "ok", out  # then run under bounded
    assert out["precision_after"] == "exact" and out["leaked"] == [0, 0, 0], out


@pytest.mark.slow  # a child process (about 1 s); the core tier keeps the no-driver and working-driver cases
def test_a_device_newer_than_nvrtc_gets_ptx_for_the_newest_architecture(fake_cuda: str) -> None:
    out = _probe(TGRAD_CUDA_DRIVER=fake_cuda, TGRAD_NVRTC=fake_cuda, TGRAD_FAKE_CUDA="cc:100")
    assert out["device"] == "Fake CUDA Device (sm_100, NVRTC 99.0, PTX)" and out["realized"] is True, out


def test_nvrtc_rejecting_a_kernel_is_kernel_compile_failed_with_its_log(fake_cuda: str) -> None:
    out = _probe(TGRAD_CUDA_DRIVER=fake_cuda, TGRAD_NVRTC=fake_cuda, TGRAD_FAKE_CUDA="compile-fails")
    assert out["error"] == "KernelCompileFailedError" and out["code"] == "kernel_compile_failed", out
    message = str(out["message"])
    assert "NVRTC failed to compile" in message and "NVRTC_ERROR_COMPILATION" in message, message
    assert "fake.cu(1): error: #error directive" in message, message
    assert out["leaked"] == [0, 0, 0] and out["fake_live"][1:] == [0, 0], out  # type: ignore[index]


@pytest.mark.slow  # eight child processes, 7-8 s on 2 cores
def test_compiled_kernels_are_kept_on_disk_for_the_next_process(fake_cuda: str, tmp_path: Path) -> None:
    """libtgrad/src/kernel_cache.c through the backend: a first process compiles each kernel and
    stores its image; a second, whose NVRTC rejects every kernel, runs from the stored images; a
    damaged file, or the cache turned off, is a miss (the compile runs, and fails again)."""
    cache = tmp_path / "kernels" / "nested"  # made on the first store
    base = {"TGRAD_CUDA_DRIVER": fake_cuda, "TGRAD_NVRTC": fake_cuda, "TGRAD_KERNEL_CACHE": str(cache)}
    assert _probe(**base)["realized"] is True
    files = sorted(cache.glob("cuda-*.bin"))
    assert files and not list(cache.glob("*.tmp"))
    out = _probe(**base, TGRAD_FAKE_CUDA="compile-fails")
    assert out["realized"] is True and "error" not in out and out["leaked"] == [0, 0, 0], out
    assert _probe(**{**base, "TGRAD_KERNEL_CACHE": "0"}, TGRAD_FAKE_CUDA="compile-fails")["error"] == \
        "KernelCompileFailedError"
    for damage in (lambda b: b[:-1], lambda b: b + b"x", lambda b: b[:40] + bytes([b[40] ^ 1]) + b[41:]):
        kept = [f.read_bytes() for f in files]
        for f, data in zip(files, kept):
            f.write_bytes(damage(data))  # a cut image, bytes after it, a changed source byte
        out = _probe(**base, TGRAD_FAKE_CUDA="compile-fails")
        assert out["error"] == "KernelCompileFailedError" and out["leaked"] == [0, 0, 0], out
        for f, data in zip(files, kept):
            f.write_bytes(data)
    assert _probe(**base, TGRAD_FAKE_CUDA="compile-fails")["realized"] is True  # restored: hits again


@pytest.mark.parametrize(("mode", "error", "name"), [
    ("module:218", "KernelCompileFailedError", "cuModuleLoadData failed: CUDA_ERROR_INVALID_PTX (218)"),
    # the other mappings, a child process each (about 1 s on 2 cores): the slow tier's
    *(pytest.param(*case, marks=pytest.mark.slow) for case in [
        ("launch:719", "InternalError", "cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED (719)"),
        ("launch:701", "RouteNotEligibleError", "cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701)"),
        ("launch:2", "OutOfMemoryError", "cuLaunchKernel failed: CUDA_ERROR_OUT_OF_MEMORY (2)"),
        ("launch:12345", "InternalError", "cuLaunchKernel failed: CUDA error (12345)"),
    ]),
])
def test_driver_failures_are_typed_and_name_the_cuda_error(fake_cuda: str, mode: str, error: str, name: str) -> None:
    out = _probe(TGRAD_CUDA_DRIVER=fake_cuda, TGRAD_NVRTC=fake_cuda, TGRAD_FAKE_CUDA=mode)
    assert out["round_trip"] is True and out["error"] == error, out
    assert str(out["message"]) == f"cuda: {name} on Fake CUDA Device (sm_90, NVRTC 99.0)", out
    assert out["leaked"] == [0, 0, 0] and out["cpu_ok"] is True, out
    assert out["fake_live"][2] == 0, out  # type: ignore[index]


_FAULTS = r"""
import ctypes, json, os
import numpy as np
import tgrad
from tgrad import errors
from tgrad._ffi import ffi, lib
fake = ctypes.CDLL(os.environ["TGRAD_CUDA_DRIVER"])
counts = [ctypes.c_int() for _ in range(3)]
x = np.arange(12, dtype=np.float32).reshape(3, 4)
base = (tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes())
out = {"failures": 0, "other": [], "leaks": []}
for n in range(1, 400):  # each allocation of the device path failing in turn, until none is reached
    lib.tgrad_debug_fail_allocation(n, ffi.NULL)
    error = None
    try:
        with tgrad.Tensor.from_numpy(x, device="cuda") as a, a.T as t, a @ t as c:
            c.numpy()
    except tgrad.TgradError as exc:
        error = (type(exc), str(exc))  # not the exception: its traceback would keep tensors alive
    finally:
        lib.tgrad_debug_fail_allocation(0, ffi.NULL)
    fake.fake_cuda_live(*[ctypes.byref(c) for c in counts])
    now = (tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes())
    if now != base or counts[0].value != 0 or counts[2].value != 0 or counts[1].value > 1:
        out["leaks"].append([n, list(now), [c.value for c in counts]])
    if error is None:
        break
    if error[0] is not errors.OutOfMemoryError:
        out["other"].append([n, error[0].__name__, error[1]])
    out["failures"] += 1
print(json.dumps(out))
"""


def test_every_allocation_of_the_device_path_failing_in_turn_is_typed_and_leaks_nothing(fake_cuda: str) -> None:
    if lib.tgrad_debug_fail_allocation(0, ffi.NULL) != 0:
        pytest.skip("libtgrad was built without fault injection")
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TGRAD_CUDA_DRIVER=fake_cuda,
                TGRAD_NVRTC=fake_cuda, TGRAD_DEVICE_POOL_BYTES="0")
    proc = subprocess.run([sys.executable, "-c", _FAULTS], capture_output=True, text=True, timeout=300, env=full)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["failures"] >= 5 and out["other"] == [] and out["leaks"] == [], out
