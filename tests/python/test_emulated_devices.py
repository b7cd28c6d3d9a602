"""The Metal device on a machine without Metal: the MSL emulator as its driver (tests/msl_emu/device.py,
through tgrad_debug_use_backend), so everything but metal.m's driver calls runs as on a Mac: the
routes, the generated MSL, the program cache, the host's rerun of flagged rows, captured programs.
And the CUDA device the same way on the CUDA emulator (everything but cuda.c's driver calls).

- The Llama of tgrad.models on device="metal" (slow tier) and on device="cuda" (cuda tier), each in
  a fresh process: bf16 and float32 logits, greedy tokens and their logits through the KV cache,
  and decode steps run as captured programs across a 32-position boundary, all bit-identical to
  the CPU's; every parameter lives on the device, and the kernels ran on the emulator (launch and
  compile counts).
- The same model with its weights packed in panels (pack_weights: batched products, float32 views
  of the logits copied on the device), and float32 and int32 views materialized there.
- float32 exp, log, log1p, sin, cos, tanh, sigmoid, silu, gelu and gelu_tanh through a reversed view:
  the CPU's bytes, subnormal inputs left to the host (its count moves); bf16 pow in a chain; a
  float32 cast to int32, and one of a NaN failing with the CPU's error.
- A log_softmax whose rows only binary128 decides: the generated kernel flags them, and the host's
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
from typing import Any

import pytest

import tgrad
from tgrad._ffi import ffi, lib

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys, tempfile
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/python"]
from msl_emu import device as emulated
name = sys.argv[2]
device = emulated.use_as_metal() if name == "metal" else emulated.use_as_cuda()  # before the device's first use
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
cpu, gpu = tgrad.models.from_pretrained(path), tgrad.models.from_pretrained(path, device=name)
out["placed"] = gpu.device == name and all(t.device == name for t in [*gpu.parameters(), *gpu.buffers()])
out["logits"] = [same(gpu(ids, logits_dtype=d), cpu(ids, logits_dtype=d)) for d in (tgrad.bfloat16, tgrad.float32)]
want_t, want_l = cpu.generate(ids, 4, return_logits=True)
got_t, got_l = gpu.generate(ids, 4, return_logits=True)
out["generate"] = same(got_t, want_t) and same(got_l, want_l)
packed = tgrad.models.from_pretrained(path, device=name, pack_weights=True)  # the batched routes, float32 copies
out["packed"] = [same(packed(ids, logits_dtype=d), cpu(ids, logits_dtype=d)) for d in (tgrad.bfloat16, tgrad.float32)]
got_t, got_l = packed.generate(ids, 4, return_logits=True)
out["packed"].append(same(got_t, want_t) and same(got_l, want_l))
del packed
x32 = np.arange(60, dtype=np.float32).reshape(3, 4, 5) * 1.5 - 7
with tgrad.Tensor.from_numpy(x32, dtype="float32", device=name) as xf, \
        tgrad.Tensor.from_numpy(x32.astype(np.int32), dtype="int32", device=name) as xi:  # 4-byte view copies
    out["copies32"] = [same(t.permute(2, 0, 1).contiguous().to("cpu"), np.ascontiguousarray(a.transpose(2, 0, 1)))
                       and same(t[:, 1:3, ::2].contiguous().to("cpu"), np.ascontiguousarray(a[:, 1:3, ::2]))
                       for t, a in ((xf, x32), (xi, x32.astype(np.int32)))]
    with xf.to(tgrad.int32) as n:  # float -> int32 on the device: truncated; a NaN fails as on the CPU
        out["to_int32"] = same(n.to("cpu"), np.trunc(x32).astype(np.int32))
    bad = x32.copy(); bad[1, 2, 3] = np.nan
    with tgrad.Tensor.from_numpy(bad, dtype="float32", device=name) as xb:
        try:
            xb.to(tgrad.int32).numpy()
            out["to_int32_nan"] = "no error"
        except tgrad.errors.InvalidArgumentError as e:
            out["to_int32_nan"] = str(e)
f32n = ffi.new("int64_t[]", int(lib.TGRAD_DEBUG_F32_COUNT))
def device_host(op):
    assert lib.tgrad_debug_f32_slow_path(tgrad.ops.REGISTRY[op].code, f32n, int(lib.TGRAD_DEBUG_F32_COUNT)) == 0
    return f32n[int(lib.TGRAD_DEBUG_F32_DEVICE_HOST)]
rng = np.random.default_rng(5)
xt = np.concatenate([rng.standard_normal(600) * s for s in (0.01, 1, 8, 60)]).astype(np.float32)
xt[:12] = [0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-39, 1.0, -1.0, 0.0625, -100.0, 89.0]  # 1e-40: the host's
out["transcendental32"], host_before = [], device_host("silu")
with tgrad.Tensor.from_numpy(xt, dtype="float32") as xc, xc.to(name) as xg:
    for op in ("exp", "log", "log1p", "sin", "cos", "tanh", "sigmoid", "silu", "gelu", "gelu_tanh"):
        out["transcendental32"].append(same(tgrad.ops.apply(op, xg[::-1]).to("cpu"), tgrad.ops.apply(op, xc[::-1])))
out["transcendental32_host"] = device_host("silu") - host_before
with tgrad.Tensor.from_numpy(xt) as bc, bc.to(name) as bg:  # bf16 pow: binary64 too, as its own kernel
    out["pow"] = [same((bg * 0.25) ** e + 1.0, (bc * 0.25) ** e + 1.0) for e in (2, 3, -0.5)]
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
with tgrad.Tensor.from_numpy(rows, dtype="float32") as x, x.to(name) as xm:
    out["boundary"] = same(tgrad.log_softmax(xm, -1, dtype=tgrad.bfloat16), tgrad.log_softmax(x, -1, dtype=tgrad.bfloat16))
out["rerun_rows"] = device_rows() - before
index = ffi.new("int32_t *")
assert lib.tgrad_device_by_name(name.encode(), index) == 0
again = lib.tgrad_debug_use_backend(index[0], device.table)
out["refused_in_use"] = again == lib.TGRAD_ERR_INVALID_ARGUMENT and b"in use" in ffi.string(lib.tgrad_last_error())
out["launches"], out["compiles"], out["errors"] = device.launches, device.compiles, device.errors
print(json.dumps(out))
"""


def _run_child(tmp_path: Path, device: str) -> dict[str, Any]:
    from msl_emu.driver import find_cxx

    if find_cxx() is None:
        pytest.skip("no C++ compiler for the emulators")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    res = subprocess.run([sys.executable, str(script), str(ROOT / "tests"), device], capture_output=True, text=True,
                         env=dict(os.environ), timeout=1500)
    assert res.returncode == 0, res.stderr[-4000:]
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def _check(out: dict[str, Any]) -> None:
    assert out["placed"] and out["logits"] == [True, True] and out["generate"], out
    assert out["packed"] == [True, True, True] and out["copies32"] == [True, True], out
    assert out["transcendental32"] == [True] * 10 and out["transcendental32_host"] >= 2, out
    assert out["pow"] == [True, True, True], out
    assert out["to_int32"] and out["to_int32_nan"] == "cast: element 33 is NaN or outside the int32 range", out
    assert out["steps"] and out["programs"] == [2, 27], out
    assert out["boundary"] and out["rerun_rows"] == 2, out
    assert out["refused_in_use"] and out["errors"] == [], out
    assert out["launches"] > 1000 and out["compiles"] > 20, out


@pytest.mark.slow
def test_the_llama_runs_on_the_emulated_metal_device_with_the_cpu_bytes(tmp_path: Path) -> None:
    _check(_run_child(tmp_path, "metal"))


@pytest.mark.cuda
def test_the_llama_runs_on_the_emulated_cuda_device_with_the_cpu_bytes(tmp_path: Path) -> None:
    _check(_run_child(tmp_path, "cuda"))


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
