"""The reduce kind on the GPU routes (docs/kernels.md, "The reduce route"): rendered in MSL, OpenCL
C and CUDA by one emitter, run on PoCL (device="opencl") and on both emulators (generated MSL and
CUDA compiled as C++ and run on the CPU), with the CPU's bytes for every case of
conformance.reductions: sums and means correctly rounded (so independent of the threads and the
tree), extrema exact with the NaN, tie and signed-zero rules, adversarial data, views, keepdims,
float32 and int32 results, and elementwise chains fused into the read and the store, fused and
unfused alike.

Tiers: the core tier renders every case in every language and runs the "core" roster on PoCL;
the slow tier runs the "ci" roster on PoCL and on the MSL emulator (three fiber orders), and the
planted defects; the cuda tier runs it on the CUDA emulator. The defects: a dropped last element
and a missing barrier in the tree must each fail on the emulators.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad import render as R
from tgrad.conformance.reductions import FUSES, ReductionCase, base_array, build, operand, reduction_roster

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CORE = reduction_roster("core")
CI = reduction_roster("ci")


def _opencl_ready() -> bool:
    try:
        tgrad.Tensor.from_numpy(np.zeros(1, np.float32), device="opencl").release()
        return True
    except errors.BackendUnavailableError:
        return False


needs_opencl = pytest.mark.skipif(not _opencl_ready(), reason="no usable OpenCL device")


@pytest.fixture
def fusion() -> Iterator[None]:
    saved = tgrad.fusion_enabled()
    yield
    tgrad.set_fusion(saved)


def _bytes(t: Any) -> np.ndarray:
    return np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8).copy()


def _input(case: ReductionCase, device: str = "cpu") -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(base_array(case), dtype=getattr(tgrad, case.dtype), device=device)


def cpu_bytes(case: ReductionCase) -> np.ndarray:
    with _input(case) as base:
        x = operand(case, base)
        out = build(tgrad, case, x)
        try:
            return _bytes(out)
        finally:
            out.release()


def device_bytes(case: ReductionCase, device: str) -> np.ndarray:
    with _input(case, device) as base:
        out = build(tgrad, case, operand(case, base))
        try:
            assert out.device == device
            return _bytes(out)
        finally:
            out.release()


def _first_difference(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"{got.size} bytes, want {want.size}"
    i = int(np.argmax(got != want))
    return f"byte {i}: got {got[i]:#04x}, want {want[i]:#04x} (of {got.size})"


# ---- rendering (core) ------------------------------------------------------------------------------
@pytest.mark.parametrize("lang", ["msl", "opencl", "cuda"])
def test_every_case_renders_one_reduce_kernel_in_each_language(lang: str) -> None:
    names = set()
    for case in CI:
        with _input(case) as base:
            out = build(tgrad, case, operand(case, base))
            try:
                if out.is_realized:
                    continue
                steps = out.explain(json=True)["steps"]
                for i, step in enumerate(steps):
                    k = R.render_tensor(out, None, lang, step=i)
                    if k.route != "reduce":
                        continue
                    assert re.match(rf"tgrad_reduce_{case.op}_\d+_[0-9a-f]{{8}}$", k.name)
                    assert k.threadgroup == (64, 1, 1) and k.buffer_names[:2] == ("x", "c")
                    assert k.threadgroup_memory == 64 * (13 if case.op in ("sum", "mean") else 4) * 4
                    names.add((k.name, k.source_hash))
            finally:
                out.release()
    assert len({n for n, _ in names}) == len(names), "one entry-point name per kernel text"


@pytest.mark.parametrize(("route", "name"), [("reduce", "tgrad_reduce_sum_70_"), ("cast", "tgrad_cast_f32_280_")])
def test_the_render_command_prints_the_reduce_and_cast_kernels(route: str, name: str) -> None:
    import subprocess

    run = subprocess.run([sys.executable, "-m", "tgrad", "render", "--shape", "4x70x1", "--route", route,
                          "--lang", "opencl", "--transpose-a"], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert f"__kernel void {name}" in run.stdout and f"(route {route}, language opencl)" in run.stdout


def test_fused_chains_are_in_the_reduce_kernel(fusion: None) -> None:
    tgrad.set_fusion(True)
    for case in CI:
        if case.program not in FUSES:
            continue
        with _input(case) as base:
            out = build(tgrad, case, operand(case, base))
            try:
                k = R.render_tensor(out, None, "msl")
                assert k.route == "reduce", case.id
                if FUSES[case.program] == "prologue":
                    assert any(n.startswith("p") for n in k.buffer_names[2:]) or "        v = tg_bf_" in k.source
                else:
                    assert "ushort v = (ushort)bits;" in k.source
            finally:
                out.release()


def test_a_device_takes_float32_and_int32_and_copies_their_views() -> None:
    if not _opencl_ready():
        pytest.skip("no usable OpenCL device")
    a = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    with tgrad.Tensor.from_numpy(a, dtype=tgrad.float32, device="opencl") as x:
        assert x.dtype is tgrad.float32 and x.device == "opencl"
        assert np.array_equal(x.numpy(), a)
        with x.to("cpu") as back:
            assert np.array_equal(back.numpy(), a)
        with x.T.reshape(12) as flat:  # a copy of a float32 view: the copy kernel's uint form (session 32)
            assert flat.device == "opencl" and np.array_equal(flat.numpy(), a.T.reshape(12))
        with tgrad.ops.apply("gelu", x) as y:  # binary64 with a bound (test_gpu_transcendental_f32.py)
            assert y.device == "opencl" and y.dtype is tgrad.float32
        with x + x as doubled:  # float32 arithmetic runs on the device
            assert np.array_equal(doubled.numpy(), a + a)
        with tgrad.argmax(x, axis=1) as i:
            assert i.dtype is tgrad.int32 and np.array_equal(i.numpy(), np.argmax(a, axis=1))


# ---- PoCL ------------------------------------------------------------------------------------------
def _check_device(case: ReductionCase, device: str) -> None:
    tgrad.set_fusion(True)
    want = cpu_bytes(case)
    for fused in (True, False):
        tgrad.set_fusion(fused)
        got = device_bytes(case, device)
        assert np.array_equal(got, want), f"{case.id} fusion={fused}: {_first_difference(got, want)}"


@needs_opencl
@pytest.mark.parametrize("case", CORE, ids=lambda c: c.id)
def test_pocl_gives_the_cpu_bytes(case: ReductionCase, fusion: None) -> None:
    _check_device(case, "opencl")


@needs_opencl
@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CI if c not in CORE], ids=lambda c: c.id)
def test_pocl_gives_the_cpu_bytes_on_the_ci_roster(case: ReductionCase, fusion: None) -> None:
    _check_device(case, "opencl")


def _long_chains(device: str) -> tgrad.Tensor:
    """sum(x0 * x1 + x2 * ... (9 binary ops)) + x10 + ... + x17: 19 buffers fused, more than a
    kernel binds (16)."""
    rng = np.random.default_rng(1)
    xs = [tgrad.Tensor.from_numpy(rng.standard_normal((4, 50)).astype(np.float32), device=device) for _ in range(18)]
    v = xs[0]
    for k in range(1, 10):
        v = v * xs[k] if k % 2 else v + xs[k]
    r = tgrad.sum(v, axis=1, keepdims=True)
    for k in range(10, 18):
        r = r + xs[k][:, :1]
    return r


@needs_opencl
def test_a_device_stores_a_prologue_whose_kernel_would_bind_too_many_buffers(fusion: None) -> None:
    tgrad.set_fusion(True)
    with _long_chains("cpu") as c, _long_chains("opencl") as d:
        assert [s["op"] for s in c.explain(json=True)["steps"]] == ["sum"]  # everything fused on the CPU
        ops = [s["op"] for s in d.explain(json=True)["steps"]]
        assert len(ops) == 2 and ops[-1] == "sum"  # the chain stored by its own step on the device
        assert np.array_equal(_bytes(d), _bytes(c))


# ---- the emulators -----------------------------------------------------------------------------------
class Harness:
    """A case's schedule, rendered step by step in one language and run on an emulator; buffers by
    tensor buffer id, tables (an op over every bf16 pattern) from the CPU."""

    def __init__(self, emu: Any, lang: str) -> None:
        self.emu, self.lang, self.tables = emu, lang, {}

    def table(self, op: str) -> np.ndarray:
        if op not in self.tables:
            self.tables[op] = R.device_table(op)
        return self.tables[op]

    def kernels(self, case: ReductionCase) -> tuple[list[R.Kernel], dict[int, np.ndarray], int]:
        """The schedule's kernels, the memory holding its inputs, and the result's buffer id."""
        from tgrad.conformance.runner import _constants_into

        base = base_array(case)
        memory: dict[int, np.ndarray] = {}
        with _input(case) as t:
            memory[t.buffer_id] = np.ascontiguousarray(base).view(np.uint16 if case.dtype == "bfloat16" else np.uint32).ravel()
            with _constants_into(memory):
                out = build(tgrad, case, operand(case, t))
            try:
                steps = out.explain(json=True)["steps"]
                kernels = [R.render_tensor(out, None, self.lang, step=i) for i in range(len(steps))]
                return kernels, memory, out.buffer_id
            finally:
                out.release()

    def run(self, kernels: list[R.Kernel], memory: dict[int, np.ndarray], **options: Any) -> None:
        self.emu.compile_many([k.source for k in kernels if 0 not in k.grid])
        for k in kernels:
            out_at = k.buffer_names.index("dst" if k.route == "copy" else "c")
            tables = k.tables()
            wide = re.search(r"\buint \*c\b", k.source) is not None
            flags_at = k.buffer_names.index("f") if "f" in k.buffer_names else -1
            bufs = []
            for i, (name, bid, n) in enumerate(zip(k.buffer_names, k.buffer_ids, k.buffer_elements)):
                if i == out_at:  # unwritten outputs show as NaN (or -1)
                    bufs.append(np.full(n, 0xFFFFFFFF if wide else 0xFFFF, np.uint32 if wide else np.uint16))
                elif i == flags_at:  # a kernel's flags (the last run's are kept in self.flags)
                    bufs.append(np.full(n, 0xFFFFFFFF, np.uint32))
                else:
                    bufs.append(self.table(tables[name]) if bid == 0 else memory[bid][:n])
            if 0 not in k.grid:
                ran = self.emu.run(self.emu.compile(k.source), k.grid, k.threadgroup, bufs,
                                   [i not in (out_at, flags_at) for i in range(len(bufs))], **options)
                bufs[out_at] = ran[out_at]
                if flags_at >= 0:
                    self.flags = np.asarray(ran[flags_at])
            memory[k.buffer_ids[out_at]] = bufs[out_at]

    def case_bytes(self, case: ReductionCase, **options: Any) -> np.ndarray:
        kernels, memory, result = self.kernels(case)
        self.run(kernels, memory, **options)
        return memory[result].view(np.uint8).copy()


def _emulated(harness: Harness, case: ReductionCase, **options: Any) -> None:
    tgrad.set_fusion(True)
    want = cpu_bytes(case)
    for fused in (True, False):
        tgrad.set_fusion(fused)
        got = harness.case_bytes(case, **options)
        assert np.array_equal(got, want), f"{case.id} fusion={fused}: {_first_difference(got, want)}"


def _msl() -> Harness:
    from msl_emu.driver import Emulator

    return Harness(Emulator(), "msl")


def _cuda() -> Harness:
    from cuda_emu.driver import Emulator

    return Harness(Emulator(), "cuda")


def _cxx() -> bool:
    from msl_emu.driver import find_cxx

    return find_cxx() is not None


needs_cxx = pytest.mark.skipif(not _cxx(), reason="no C++ compiler for the emulators")
ORDER_CASES = [c for c in CI if c.fill in ("special", "cancel") and c.view == "plain"][:6]


@pytest.fixture(scope="module")
def msl() -> Harness:
    return _msl()


@pytest.fixture(scope="module")
def cuda() -> Harness:
    return _cuda()


@needs_cxx
@pytest.mark.slow
@pytest.mark.parametrize("case", CI, ids=lambda c: c.id)
def test_generated_msl_gives_the_cpu_bytes(msl: Harness, case: ReductionCase, fusion: None) -> None:
    _emulated(msl, case)


@needs_cxx
@pytest.mark.slow
@pytest.mark.parametrize("order", ["reverse", "shuffle"])
@pytest.mark.parametrize("case", ORDER_CASES, ids=lambda c: c.id)
def test_generated_msl_is_the_same_under_every_fiber_order(msl: Harness, case: ReductionCase, order: str,
                                                           fusion: None) -> None:
    _emulated(msl, case, order=order, seed=7)


@needs_cxx
@pytest.mark.cuda
@pytest.mark.parametrize("case", CI, ids=lambda c: c.id)
def test_generated_cuda_gives_the_cpu_bytes(cuda: Harness, case: ReductionCase, fusion: None) -> None:
    _emulated(cuda, case)


# ---- planted defects ---------------------------------------------------------------------------------
TEETH = next(c for c in CI if c.op == "sum" and c.fill == "normal" and c.dtype == "float32" and c.view == "plain")
TEETH_ARG = next(c for c in CI if c.op == "argmax" and c.fill == "rising" and c.view == "plain" and c.dtype == "bfloat16")


def _mutated(harness: Harness, case: ReductionCase, old: str, new: str, **options: Any) -> np.ndarray:
    tgrad.set_fusion(True)
    kernels, memory, result = harness.kernels(case)
    (k,) = [k for k in kernels if k.route == "reduce"]
    assert k.source.count(old) >= 1, old
    source = k.source.replace(old, new, 1)
    harness.run([R.Kernel(**{**k.__dict__, "source": source})], memory, **options)
    return memory[result].view(np.uint8).copy()


def _drop_last(case: ReductionCase, k_source: str) -> tuple[str, str]:
    count = int(re.search(r"for \(\w+ j = li; j < (\d+); j \+= 64\)", k_source).group(1))
    return f"j < {count};", f"j < {count - 1};"


BARRIERS = {"msl": "threadgroup_barrier(mem_flags::mem_threadgroup);", "cuda": "__syncthreads();"}


def _teeth(harness: Harness) -> None:
    for case in (TEETH, TEETH_ARG):  # a dropped last element changes the sum and the argmax
        kernels, _, _ = harness.kernels(case)
        old, new = _drop_last(case, next(k for k in kernels if k.route == "reduce").source)
        assert not np.array_equal(_mutated(harness, case, old, new), cpu_bytes(case)), f"{case.id}: a dropped element"
    # the barrier after each round of the tree, and the one before it: without either, a thread
    # reads a slot that another writes in the same barrier interval
    barrier = BARRIERS[harness.lang]
    for old in (barrier + "\n    }\n", barrier + "\n    for (int s = "):
        with pytest.raises(Exception, match="data race"):
            _mutated(harness, TEETH, old, old.replace(barrier, ""))


@needs_cxx
@pytest.mark.slow
def test_the_msl_emulator_catches_a_dropped_element_and_a_missing_tree_barrier(msl: Harness, fusion: None) -> None:
    _teeth(msl)


@needs_cxx
@pytest.mark.cuda
def test_the_cuda_emulator_catches_a_dropped_element_and_a_missing_tree_barrier(cuda: Harness, fusion: None) -> None:
    _teeth(cuda)
