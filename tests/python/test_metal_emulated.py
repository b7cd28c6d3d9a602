"""The Metal device on a machine without Metal: the MSL emulator as its driver (tests/msl_emu/device.py,
through tgrad_debug_use_backend), so everything but metal.m's driver calls runs as on a Mac: the
routes, the generated MSL, the program cache, the host's rerun of flagged rows, captured programs.

- The Llama of tgrad.models on device="metal" (slow tier, a fresh process): bf16 and float32
  logits, greedy tokens and their logits through the KV cache, and decode steps run as captured
  programs across a 32-position boundary, all bit-identical to the CPU's; every parameter lives on
  the device, and the kernels ran on the emulator (launch and compile counts).
- A log_softmax whose rows only binary128 decides: the generated MSL flags them, and the host's
  rerun gives the CPU's bytes (the softmax kind's device-rows counter moves).
- tgrad_debug_use_backend refuses the CPU, an unknown device, a missing call, and a device already
  in use (core tier: nothing changes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tgrad
from tgrad._ffi import ffi, lib

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys, tempfile
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/python"]
from msl_emu.device import use_as_metal
device = use_as_metal()  # before anything touches the Metal device
import numpy as np
import tgrad, tgrad.models
from tgrad._ffi import ffi, lib
from tgrad.models.step import DecodeSteps
from model_dirs import model_dir

def same(a, b):
    a = a.numpy() if hasattr(a, "numpy") else np.asarray(a)
    b = b.numpy() if hasattr(b, "numpy") else np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()

out = {}
path = model_dir(Path(tempfile.mkdtemp()))
ids = np.random.default_rng(9).integers(0, 96, (2, 6))
cpu, gpu = tgrad.models.from_pretrained(path), tgrad.models.from_pretrained(path, device="metal")
out["placed"] = gpu.device == "metal" and all(t.device == "metal" for t in [*gpu.parameters(), *gpu.buffers()])
out["logits"] = [same(gpu(ids, logits_dtype=d), cpu(ids, logits_dtype=d)) for d in (tgrad.bfloat16, tgrad.float32)]
want_t, want_l = cpu.generate(ids, 4, return_logits=True)
got_t, got_l = gpu.generate(ids, 4, return_logits=True)
out["generate"] = same(got_t, want_t) and same(got_l, want_l)
want_t, want_l = cpu.generate(ids[:1], 30, return_logits=True)
cache = gpu.new_cache(40)
gpu(ids[:1], cache=cache, logits_to_keep=1, logits_dtype=tgrad.float32)
steps = DecodeSteps(gpu, cache)
out["steps"] = all(same(steps(want_t[:, i:i + 1]), want_l[:, i + 1:i + 2]) for i in range(29))
out["programs"] = [steps.captures, steps.runs]

counts = ffi.new("int64_t[]", int(lib.TGRAD_DEBUG_SOFTMAX_COUNT))
def device_rows():
    assert lib.tgrad_debug_softmax_slow_path(counts, int(lib.TGRAD_DEBUG_SOFTMAX_COUNT)) == 0
    return counts[int(lib.TGRAD_DEBUG_SOFTMAX_DEVICE_ROWS)]
rows = np.array([[512.0, 1.0, 3.0], [610.0, 0.0, -0.5]], np.float32)  # only binary128 decides them
before = device_rows()
with tgrad.Tensor.from_numpy(rows, dtype="float32") as x, x.to("metal") as xm:
    out["boundary"] = same(tgrad.log_softmax(xm, -1, dtype=tgrad.bfloat16), tgrad.log_softmax(x, -1, dtype=tgrad.bfloat16))
out["rerun_rows"] = device_rows() - before
again = lib.tgrad_debug_use_backend(lib.TGRAD_DEVICE_METAL, device.table)
out["refused_in_use"] = again == lib.TGRAD_ERR_INVALID_ARGUMENT and b"in use" in ffi.string(lib.tgrad_last_error())
out["launches"], out["compiles"], out["errors"] = device.launches, device.compiles, device.errors
print(json.dumps(out))
"""


@pytest.mark.slow
def test_the_llama_runs_on_the_emulated_metal_device_with_the_cpu_bytes(tmp_path: Path) -> None:
    from msl_emu.driver import find_cxx

    if find_cxx() is None:
        pytest.skip("no C++ compiler for the MSL emulator")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ)
    res = subprocess.run([sys.executable, str(script), str(ROOT / "tests")], capture_output=True, text=True,
                         env=env, timeout=1500)
    assert res.returncode == 0, res.stderr[-4000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["placed"] and out["logits"] == [True, True] and out["generate"], out
    assert out["steps"] and out["programs"] == [2, 27], out
    assert out["boundary"] and out["rerun_rows"] == 2, out
    assert out["refused_in_use"] and out["errors"] == [], out
    assert out["launches"] > 1000 and out["compiles"] > 20, out


def _table() -> object:
    noop = ffi.callback("void(void *)", lambda p: None)
    table = ffi.new("tgrad_debug_backend *", {"free": noop, "release_program": noop})
    return table, noop


@pytest.mark.parametrize("device", [0, 4, -1])
def test_a_stand_in_is_refused_for_the_cpu_and_unknown_devices(device: int) -> None:
    table, _keep = _table()
    assert lib.tgrad_debug_use_backend(device, table) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert b"not a GPU device" in ffi.string(lib.tgrad_last_error())


def test_a_stand_in_missing_a_call_is_refused_and_changes_nothing() -> None:
    table, _keep = _table()  # alloc, copies, compile and launch missing
    for device in (lib.TGRAD_DEVICE_METAL, lib.TGRAD_DEVICE_OPENCL, lib.TGRAD_DEVICE_CUDA):
        assert lib.tgrad_debug_use_backend(device, table) == lib.TGRAD_ERR_INVALID_ARGUMENT
        assert b"needs every call" in ffi.string(lib.tgrad_last_error())
    assert lib.tgrad_debug_use_backend(lib.TGRAD_DEVICE_METAL, ffi.NULL) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert {b.name for b in tgrad.backends()} >= {"cpu", "metal"}
