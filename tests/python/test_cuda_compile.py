"""The `cuda` tier's compile check: every distinct kernel the conformance rosters render, in CUDA
C++, through the toolkit's compilers (no GPU needed).

The kernels: each matmul case of the "ci" and "full" rosters under naive, tiled and tc (where
eligible) and under naive and tiled in the block32 order, a copy of each of its operand views,
and each step of each graph case's schedule (fused and unfused, every route) exactly as
tgrad.render.render_tensor renders it for a device, epilogues included, and so is each step of
each reduction case (conformance.reductions: the reduce route, its prologues and epilogues) and a
few bfloat16 <-> float32 and int32 <-> float casts (the cast route), the float32 elementwise ops
(tests/python/test_gpu_elementwise_f32.py), the batched products of tests/python/batched_cases.py
(every route, both orders, epilogues), the random route's draws (tests/python/test_gpu_random.py)
the softmax, norm and rope routes' kernels (tests/python/test_gpu_softmax.py,
test_gpu_norm.py, test_gpu_rope.py), the gradient's place, scatter_add and optim_step kernels
(tests/python/test_gpu_grad_kinds.py), and every step of the tiny Llama's forward with and without
its KV cache (tests/python/model_dirs.py). Identical texts are compiled once.

- nvcc to PTX for sm_80 and sm_90 with ``-fmad=false`` (no fast math), then ptxas -v once per
  arch: every kernel must compile without a warning, appear as an entry point, use no local
  memory (no stack frame, no spill; the rope route's kernels and float32 sin and cos: at most the
  40-byte frame of CUDA's double sin and cos) and declare exactly the shared memory its launch says. The
  registers and shared memory of every kernel go to a table (TGRAD_CUDA_REPORT_DIR, else pytest's
  temp directory) and a summary per route is printed.
- NVRTC (the `cuda` extra's wheel, through ctypes) with ``--gpu-architecture=sm_80 --fmad=false``,
  the options the CUDA backend compiles with: no error, no warning.

To be fast (2 cores in CI), each compiler sees one file: every kernel in its own
``namespace k<i> { ... }`` (entry points are extern "C" and unique by their hash), one nvcc and
one ptxas call per arch, one NVRTC program. A problem is reported by kernel name: a compiler
message's line number points into a namespace, a PTX line into an entry. The mutant tests show
that a broken kernel, a warning and a spill each fail and are named.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from cuda_tools import nvrtc_library, tool

import tgrad
from tgrad import errors
from tgrad import render as R
from tgrad.conformance.graphs import PROGRAMS, build_graph_operands, graph_roster
from tgrad.conformance.reductions import base_array, build, operand, reduction_roster
from tgrad.conformance.rosters import apply_view_ops, base_shape, roster, view_ops

pytestmark = pytest.mark.cuda

ARCHS = ("sm_80", "sm_90")
MATMUL_ROUTES = ("naive", "tiled", "tc")
NVCC_FLAGS = ("-fmad=false", "-ptx")  # no --use_fast_math: IEEE division, sqrt and denormals


# ---- the kernels ----------------------------------------------------------------------------------
def _zeros(shape: tuple[int, ...]) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(np.zeros(shape, ml_dtypes.bfloat16))


def _matmul_kernels(add) -> None:
    """Each roster case's product by every eligible route, and a copy of each operand view. Only
    views shape the text, so the operands are zeros."""
    for name in ("ci", "full"):
        for case in roster(name):
            specs = [(base_shape(case.a_view, case.m, case.k), view_ops(case.a_view, case.m, case.k)),
                     (base_shape(case.b_view, case.k, case.n), view_ops(case.b_view, case.k, case.n))]
            bases = [_zeros(shape) for shape, _ in specs]
            a, b = (apply_view_ops(t, ops) for t, (_, ops) in zip(bases, specs))
            try:
                for route in MATMUL_ROUTES:
                    try:
                        add(R.render_matmul(a, b, route, "cuda"))
                    except errors.RouteNotEligibleError:
                        assert route == "tc" and min(case.m, case.k, case.n) < 8
                with tgrad.matmul_order("block32"):  # the second documented order (naive, tiled)
                    for route in ("naive", "tiled"):
                        add(R.render_matmul(a, b, route, "cuda"))
                add(R.render_copy(a, "cuda"))
                add(R.render_copy(b, "cuda"))
            finally:
                for t in {id(t): t for t in (a, b, *bases)}.values():
                    t.release()


def _graph_kernels(add) -> None:
    """Every step of every graph case's schedule, fused and unfused, under every route."""
    saved = tgrad.fusion_enabled()
    try:
        for name in ("ci", "full"):
            for case in graph_roster(name):
                bases, apply_view = build_graph_operands(case)
                tensors = [tgrad.Tensor.from_numpy(b) for b in bases]
                try:
                    for fusion in (True, False):
                        tgrad.set_fusion(fusion)
                        _program_kernels(case, tensors, apply_view, add)
                finally:
                    for t in tensors:
                        t.release()
    finally:
        tgrad.set_fusion(saved)


def _program_kernels(case, tensors, apply_view, add) -> None:
    operands = [apply_view(t, i) for i, t in enumerate(tensors)]
    out = PROGRAMS[case.program](tgrad, *operands)
    try:
        if out.is_realized:
            return
        steps = out.explain(json=True)["steps"]
        for route in MATMUL_ROUTES:
            for i, step in enumerate(steps):
                try:
                    add(R.render_tensor(out, route, "cuda", step=i))
                except errors.RouteNotEligibleError as exc:
                    # pow has no spelling in the integer-only GPU prelude: a step with it is refused
                    # on every route (test_opencl.py holds that refusal), the rest renders
                    if "has no kernel spelling" not in str(exc):
                        assert route == "tc" and step["op"] == "matmul"
    finally:
        for t in {id(t): t for t in (out, *operands) if all(t is not b for b in tensors)}.values():
            t.release()


def _reduction_kernels(add) -> None:
    """Every step of every reduction case's schedule (conformance.reductions), fused and unfused."""
    saved = tgrad.fusion_enabled()
    try:
        for case in reduction_roster("ci"):
            for fusion in (True, False):
                tgrad.set_fusion(fusion)
                with tgrad.Tensor.from_numpy(base_array(case), dtype=getattr(tgrad, case.dtype)) as base:
                    out = build(tgrad, case, operand(case, base))
                    try:
                        for i in range(len(out.explain(json=True)["steps"])):
                            add(R.render_tensor(out, None, "cuda", step=i))
                    finally:
                        out.release()
    finally:
        tgrad.set_fusion(saved)


def _cast_kernels(add) -> None:
    """bfloat16 <-> float32 and int32 <-> either casts (the cast route) of a plain and a transposed,
    sliced view."""
    for dtype, to in ((tgrad.bfloat16, tgrad.float32), (tgrad.float32, tgrad.bfloat16), (tgrad.int32, tgrad.float32),
                      (tgrad.int32, tgrad.bfloat16), (tgrad.float32, tgrad.int32), (tgrad.bfloat16, tgrad.int32)):
        with tgrad.Tensor.from_numpy(np.zeros((33, 70), np.float32 if dtype is not tgrad.int32 else np.int32),
                                     dtype=dtype) as x:
            for v in (x, x.T[::2, 1:]):
                with v.to(to) as y:
                    add(R.render_tensor(y, None, "cuda"))


def _select_kernels(add) -> None:
    """gather and concat (tests/python/test_gpu_select.py's cases) in every element size."""
    from test_gpu_select import CASES, DTYPES, _arrays

    for name, (_, build) in CASES.items():
        for dtype in DTYPES if name != "concat_twenty_operands" else ():  # a CPU node of 20: no kernel
            ts = [tgrad.Tensor.from_numpy(a, dtype=getattr(tgrad, dt)) for a, dt in _arrays(name, dtype)]
            with build(*ts) as y:
                for i in range(len(y.explain(json=True)["steps"])):
                    add(R.render_tensor(y, None, "cuda", step=i))
            for t in ts:
                t.release()


def _compare_kernels(add) -> None:
    """compare and where (tests/python/test_gpu_compare.py's cases)."""
    from test_gpu_compare import CMP_CASES, DTYPES, OPS, WHERE_CASES, _cmp_maker, _where_maker

    makers = [_cmp_maker(name, op) for name in CMP_CASES for op in OPS]
    makers += [_where_maker(name, dtype) for name in WHERE_CASES for dtype in DTYPES]
    for make in makers:
        y, inputs = make()
        add(R.render_tensor(y, None, "cuda"))
        for t in (y, *inputs):
            t.release()


def _batched_kernels(add) -> None:
    """The batched products of tests/python/batched_cases.py by every route, both orders, and with
    a fused epilogue (tests/python/test_gpu_batched.py runs them)."""
    from batched_cases import CASES, operands

    for case in CASES:
        a, b, bases = operands(case)
        try:
            for order in ("pairwise", "block32"):
                with tgrad.matmul_order(order):
                    c = a @ b
                for y in (c, tgrad.relu(c + c)):
                    for route in MATMUL_ROUTES:
                        try:
                            add(R.render_tensor(y, route, "cuda"))
                        except errors.RouteNotEligibleError:
                            assert route == "tc"
        finally:
            for t in bases:
                t.release()


def _random_kernels(add) -> None:
    """The uniform, randint, normal and float32 uniform(low, high) draws of
    tests/python/test_gpu_random.py (the random route)."""
    from test_gpu_random import DRAWS, NORMALS, RANGED

    for d in DRAWS + NORMALS + RANGED:
        with d.make("cpu") as t:
            add(R.render_tensor(t, None, "cuda"))


def _float32_kernels(add) -> None:
    """float32 results (the accumulators; tests/python/test_gpu_matmul_f32.py) on naive and tiled,
    both orders, a 2-D product and a batched one through views."""
    from batched_cases import CASES, operands

    for case in [c for c in CASES if c.name in ("plain", "two_batch_axes", "reversed")]:
        a, b, bases = operands(case)
        try:
            for order in ("pairwise", "block32"):
                for route in ("naive", "tiled"):
                    add(R.render_tensor(tgrad.matmul(a, b, out_dtype=tgrad.float32, order=order), route, "cuda"))
        finally:
            for t in bases:
                t.release()


def _float32_elementwise_kernels(add) -> None:
    """Every float32 elementwise op the GPU routes render (kernels/gpu/elementwise_f32.h;
    tests/python/test_gpu_elementwise_f32.py), binary ones through a broadcast operand, and the
    transcendental and derivative ops and pow, bf16's too (kernels/gpu/transcendental_f32.h)."""
    from test_gpu_elementwise_f32 import BINARY, UNARY

    x = tgrad.Tensor.from_numpy(np.zeros((3, 5), np.float32), dtype=tgrad.float32)
    row = tgrad.Tensor.from_numpy(np.zeros(5, np.float32), dtype=tgrad.float32)
    for f in BINARY.values():
        add(R.render_tensor(f(x, row), None, "cuda"))
    for g in UNARY.values():
        add(R.render_tensor(g(x.T), None, "cuda"))
    from test_gpu_transcendental_f32 import GRADS, OPS  # binary64 with a bound (kernels/gpu/transcendental_f32.h)

    for name in OPS:
        add(R.render_tensor(tgrad.ops.apply(name, x.T), None, "cuda"))
    for name in GRADS + ["pow"]:
        add(R.render_tensor(tgrad.ops.apply(name, x, row), None, "cuda"))
    xb = tgrad.Tensor.from_numpy(np.zeros((3, 5), np.float32))  # bf16 pow: binary64 too
    add(R.render_tensor(tgrad.ops.apply("pow", xb.T, xb.T), None, "cuda"))


def _model_kernels(add) -> None:
    """Every step of the tiny Llama's forward, and of a prompt's forward into its KV cache
    (tests/python/model_dirs.py; tgrad.models on device="cuda", tests/python/test_models_device.py)."""
    from model_dirs import config, forward_steps, in_memory

    for y, step in forward_steps(in_memory(config())):
        add(R.render_tensor(y, None, "cuda", step=step))


def _softmax_kernels(add) -> None:
    """softmax, log_softmax and logsumexp (the softmax route), bf16 and float32 in and out, rows
    along the last axis and strided ones, a long row and an empty one (tests/python/test_gpu_softmax.py)."""
    from test_gpu_softmax import DTYPES, OPS, _apply

    rng = np.random.default_rng(0)
    for op in OPS:
        for dtype, out_dtype in DTYPES:
            for shape, dim in (((3, 37), -1), ((4, 5, 6), 1), ((2, 4099), -1), ((3, 0), -1)):
                with tgrad.Tensor.from_numpy(rng.standard_normal(shape).astype(np.float32), dtype=dtype) as t:
                    y = _apply(op, t, dim, out_dtype)
                    add(R.render_tensor(y, None, "cuda"))
                    y.release()


def _norm_kernels(add) -> None:
    """rms_norm and layer_norm (the norm route): with and without weight and bias, one and two axes,
    a strided view and a long row (tests/python/test_gpu_norm.py)."""
    rng = np.random.default_rng(0)

    def bf(shape: tuple[int, ...]) -> tgrad.Tensor:
        return tgrad.Tensor.from_numpy(rng.standard_normal(shape).astype(np.float32), dtype="bfloat16")

    for shape, norm_shape in (((3, 37), 37), ((2, 3, 40), (3, 40)), ((2, 4099), 4099)):
        x = bf(shape)
        wshape = (norm_shape,) if isinstance(norm_shape, int) else norm_shape
        for w, b in ((None, None), (bf(wshape), None), (bf(wshape), bf(wshape))):
            add(R.render_tensor(tgrad.rms_norm(x, norm_shape, w, eps=1e-6), None, "cuda"))
            add(R.render_tensor(tgrad.layer_norm(x, norm_shape, w, b, eps=1e-5), None, "cuda"))
    add(R.render_tensor(tgrad.layer_norm(bf((40, 6)).transpose(0, 1), 40), None, "cuda"))


def _rope_kernels(add) -> None:
    """rope and rope_backward (the rope route): half-split and interleaved, a partial rotary_dim,
    inv_freq given, batched positions (tests/python/test_gpu_rope.py)."""
    from test_gpu_rope import CONFIGS, _case, _make

    rng = np.random.default_rng(0)
    for kw, batched, backward in CONFIGS:
        x, pos, inv, k = _case(kw, batched, rng)
        add(R.render_tensor(_make("cpu", x, pos, inv, k, backward), None, "cuda"))


def _grad_kind_kernels(add) -> None:
    """place, scatter_add and optim_step (the gradient's routes): every case of
    tests/python/test_gpu_grad_kinds.py; softmax_backward and log_softmax_backward (the softmax
    route) in every dtype mix of tests/python/test_gpu_softmax_backward.py, and rms_norm_backward and
    layer_norm_backward (the norm route) in those of tests/python/test_gpu_norm_backward.py."""
    from test_gpu_grad_kinds import ALL
    from test_gpu_softmax_backward import MIXES, OPS, SHAPES, _inputs, backward

    for _, build, args in ALL:
        t, _ = build(*args, "cpu")
        for i in range(len(t.explain(json=True)["steps"])):
            add(R.render_tensor(t, None, "cuda", step=i))
    for op in OPS:
        for mix in MIXES:
            for shape, axis in SHAPES:
                x, g = _inputs(op, shape, 0)
                add(R.render_tensor(backward(op, x, g, axis, mix, "cpu"), None, "cuda"))
    import test_gpu_norm_backward as nb

    for op in nb.OPS:
        for mix4 in nb.MIXES:
            for shape, naxes in nb.SHAPES:
                for weight in (False, True):
                    x, g, w = nb._inputs(shape, naxes, 0)
                    add(R.render_tensor(nb.backward(op, x, g, w if weight else None, naxes, mix4, "cpu"), None, "cuda"))


@functools.lru_cache(maxsize=1)
def roster_kernels() -> tuple[R.Kernel, ...]:
    """The distinct kernels (by text) with something to dispatch; entry-point names are unique."""
    by_text: dict[str, R.Kernel] = {}

    def add(kernel: R.Kernel) -> None:
        if 0 not in kernel.grid:
            by_text.setdefault(kernel.source, kernel)

    _matmul_kernels(add)
    _graph_kernels(add)
    _reduction_kernels(add)
    _cast_kernels(add)
    _select_kernels(add)
    _compare_kernels(add)
    _batched_kernels(add)
    _random_kernels(add)
    _float32_kernels(add)
    _float32_elementwise_kernels(add)
    _model_kernels(add)
    _softmax_kernels(add)
    _norm_kernels(add)
    _rope_kernels(add)
    _grad_kind_kernels(add)
    kernels = tuple(by_text.values())
    names = [k.name for k in kernels]
    assert len(names) == len(set(names)), "two different kernel texts share an entry-point name"
    return kernels


# ---- one file for many kernels, and messages traced back to them --------------------------------
@dataclass
class Batch:
    """Kernels in one translation unit, each in its own namespace, with the lines each spans."""

    kernels: tuple[R.Kernel, ...]
    text: str = ""
    spans: list[tuple[int, int, str]] = field(default_factory=list)  # (first line, last line, name)

    def __post_init__(self) -> None:
        parts, line = [], 1
        for i, k in enumerate(self.kernels):
            part = f"namespace k{i} {{ // {k.name}\n{k.source}}} // namespace k{i}\n"
            self.spans.append((line, line + part.count("\n") - 1, k.name))
            parts.append(part)
            line += part.count("\n")
        self.text = "".join(parts)

    def kernel_at(self, line: int) -> str:
        for first, last, name in self.spans:
            if first <= line <= last:
                return name
        return "(outside every kernel)"


@dataclass
class Problems:
    """Errors and warnings by kernel name."""

    by_kernel: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, name: str, message: str) -> None:
        self.by_kernel[name].append(message.strip())

    def __bool__(self) -> bool:
        return bool(self.by_kernel)

    def report(self, what: str) -> str:
        lines = [f"{what}: {len(self.by_kernel)} kernel(s) with problems"]
        for name, messages in sorted(self.by_kernel.items()):
            lines.append(f"  {name}:")
            lines += [f"    {m[:300]}" for m in messages[:5]]
        return "\n".join(lines)


# `file.cu(123): error: ...`, `file.cu(45): warning #177-D: ...` (nvcc and NVRTC alike)
SOURCE_MESSAGE = re.compile(r"^[^\s(]*\((\d+)\): (error|warning|catastrophic error)\b.*$", re.M)


def _blame_source(log: str, batch: Batch, problems: Problems, tool_name: str) -> None:
    """Every error or warning line of a compiler's log, charged to the kernel its line is in. A log
    with none of those but a line that says error, warning or fatal is charged to no kernel (it
    still fails); with some, such lines are the compiler's summaries ("1 error detected ...")."""
    located = SOURCE_MESSAGE.findall(log)
    for m in SOURCE_MESSAGE.finditer(log):
        problems.add(batch.kernel_at(int(m.group(1))), f"{tool_name}: {m.group(0)}")
    for line in log.splitlines() if not located else ():
        if re.search(r"\b(error|warning|fatal)\b", line, re.I):
            problems.add("(no kernel)", f"{tool_name}: {line}")


def nvcc_ptx(batch: Batch, arch: str, directory: Path) -> tuple[str, Problems]:
    """nvcc: the batch to PTX for `arch`. (PTX text, problems)."""
    src, ptx = directory / f"kernels_{arch}.cu", directory / f"kernels_{arch}.ptx"
    src.write_text(batch.text)
    run = subprocess.run([tool("nvcc"), f"-arch={arch}", *NVCC_FLAGS, "-o", str(ptx), str(src)],
                         capture_output=True, text=True, check=False)
    problems = Problems()
    _blame_source(run.stdout + run.stderr, batch, problems, f"nvcc {arch}")
    if run.returncode != 0 and not problems:
        problems.add("(no kernel)", f"nvcc {arch} exited with {run.returncode}: {run.stderr[-500:]}")
    return (ptx.read_text() if run.returncode == 0 else ""), problems


@dataclass(frozen=True)
class Usage:
    """What ptxas -v reports for one entry point."""

    name: str
    registers: int
    smem: int
    stack: int
    spill_stores: int
    spill_loads: int


USAGE = re.compile(
    r"Compiling entry function '(?P<name>\w+)' for '\w+'\n"
    r"(?:.*\n)*?.*?Function properties for (?P=name)\n"
    r"\s*(?P<stack>\d+) bytes stack frame, (?P<st>\d+) bytes spill stores, (?P<ld>\d+) bytes spill loads\n"
    r".*?Used (?P<regs>\d+) registers(?P<rest>.*)")


def ptxas(ptx: str, arch: str, directory: Path, extra: tuple[str, ...] = ()) -> tuple[dict[str, Usage], Problems]:
    """ptxas -v on one PTX file: the usage of each entry point, and problems (an error or warning,
    charged to the entry its PTX line is in)."""
    path = directory / f"kernels_{arch}.ptx"
    path.write_text(ptx)
    cubin = path.with_suffix(".cubin")
    run = subprocess.run([tool("ptxas"), f"-arch={arch}", "-v", *extra, str(path), "-o", str(cubin)],
                         capture_output=True, text=True, check=False)
    log = run.stdout + run.stderr
    usage = {}
    for m in USAGE.finditer(log):
        smem = re.search(r"(\d+) bytes smem", m.group("rest"))
        usage[m.group("name")] = Usage(m.group("name"), int(m.group("regs")), int(smem.group(1)) if smem else 0,
                                       int(m.group("stack")), int(m.group("st")), int(m.group("ld")))
    problems = Problems()
    entries = [(i + 1, e.group(1)) for i, line in enumerate(ptx.splitlines())
               if (e := re.match(r"\.visible \.entry (\w+)\(", line))]
    for line in log.splitlines():
        if not re.search(r"\b(error|warning|fatal)\b", line, re.I):
            continue
        at, function = re.search(r"\bline (\d+)\b", line), re.search(r"\bin function '?(\w+)", line)
        owner = function.group(1) if function else "(no kernel)"
        if at and not function:
            owner = next((name for first, name in reversed(entries) if first <= int(at.group(1))), owner)
        problems.add(owner, f"ptxas {arch}: {line}")
    if run.returncode != 0 and not problems:
        problems.add("(no kernel)", f"ptxas {arch} exited with {run.returncode}: {log[-500:]}")
    return usage, problems


def _empty_k(kernel: R.Kernel) -> bool:
    """A matmul with K = 0 (`tgrad_<route>_<M>x0x<N>_...`): its k loop never runs, so the compiler
    drops the unused shared tiles. No device launches it (device.c writes the zeros itself)."""
    return re.fullmatch(r"tgrad_\w+?_\d+x0x\d+_[0-9a-f]+", kernel.name) is not None


ROPE_TRIG_FRAME = 40


def check_usage(kernels: tuple[R.Kernel, ...], usage: dict[str, Usage], arch: str, problems: Problems) -> None:
    """Every kernel is an entry point with no local memory and the shared memory its launch says
    (at most that for K = 0)."""
    for k in kernels:
        u = usage.get(k.name)
        if u is None:
            problems.add(k.name, f"ptxas {arch}: no entry point {k.name}")
            continue
        # CUDA's double sin and cos (the rope route, the normal draw's Box-Muller) keep a 40-byte
        # frame for the Payne-Hanek reduction of large arguments (libdevice's
        # __internal_trig_reduction_slowpathd): that much stack is theirs, and allowed there; spills
        # never are
        allowed = ROPE_TRIG_FRAME if k.name.startswith(("tgrad_rope_", "tgrad_random_normal_", "tgrad_elementwise_f32_sin_",
                                                        "tgrad_elementwise_f32_cos_")) else 0
        if u.stack > allowed or u.spill_stores or u.spill_loads:
            problems.add(k.name, f"ptxas {arch}: local memory: {u.stack} bytes stack frame, {u.spill_stores} bytes "
                                 f"spill stores, {u.spill_loads} bytes spill loads ({u.registers} registers)")
        if u.smem != k.threadgroup_memory and not (_empty_k(k) and u.smem < k.threadgroup_memory):
            problems.add(k.name, f"ptxas {arch}: {u.smem} bytes of shared memory, the launch says "
                                 f"{k.threadgroup_memory}")


# ---- NVRTC through ctypes ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _nvrtc() -> ctypes.CDLL:
    lib = ctypes.CDLL(nvrtc_library())
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return lib


def nvrtc_compile(batch: Batch, options: tuple[str, ...]) -> tuple[str, Problems]:
    """NVRTC on the batch: (its PTX, problems from its log and its status)."""
    lib, prog = _nvrtc(), ctypes.c_void_p()

    def ok(status: int, what: str) -> None:
        assert status == 0, f"{what}: {lib.nvrtcGetErrorString(status).decode()}"

    ok(lib.nvrtcCreateProgram(ctypes.byref(prog), batch.text.encode(), b"kernels.cu", 0, None, None),
       "nvrtcCreateProgram")
    try:
        opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
        status = lib.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        ok(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
        log = ctypes.create_string_buffer(size.value)
        ok(lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        problems = Problems()
        _blame_source(log.value.decode(errors="replace"), batch, problems, "nvrtc")
        if status != 0:
            if not problems:
                problems.add("(no kernel)", f"nvrtc: {lib.nvrtcGetErrorString(status).decode()}")
            return "", problems
        ok(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        ptx = ctypes.create_string_buffer(size.value)
        ok(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
        return ptx.value.decode(), problems
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


NVRTC_OPTIONS = ("--gpu-architecture=sm_80", "--fmad=false")


def _entries(ptx: str) -> set[str]:
    return set(re.findall(r"^\.visible \.entry (\w+)\(", ptx, re.M))


# ---- the report -------------------------------------------------------------------------------------
def _report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = os.environ.get("TGRAD_CUDA_REPORT_DIR")
    path = Path(env) if env else tmp_path_factory.getbasetemp() / "cuda-report"
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_report(kernels: tuple[R.Kernel, ...], usage: dict[str, Usage], arch: str, path: Path) -> str:
    """A markdown table, one row per kernel, at `path`; returns a summary per route."""
    rows = ["| kernel | route | registers | shared memory (bytes) | stack | spill stores | spill loads |",
            "|---|---|---|---|---|---|---|"]
    per_route: dict[str, list[Usage]] = defaultdict(list)
    for k in sorted(kernels, key=lambda k: (k.route, k.name)):
        u = usage.get(k.name)
        if u is None:
            continue
        kind = k.route + ("+epilogue" if k.route in MATMUL_ROUTES and len(k.buffer_names) > 3 else "")
        per_route[kind].append(u)
        rows.append(f"| {k.name} | {kind} | {u.registers} | {u.smem} | {u.stack} | {u.spill_stores} "
                    f"| {u.spill_loads} |")
    path.write_text(f"# ptxas -v, {arch}, {len(kernels)} kernels (tests/python/test_cuda_compile.py)\n\n"
                    + "\n".join(rows) + "\n")
    lines = [f"{arch}: {len(kernels)} kernels, table in {path}"]
    for kind, us in sorted(per_route.items()):
        regs, spills = [u.registers for u in us], sum(u.spill_stores + u.spill_loads for u in us)
        lines.append(f"  {kind:<20} {len(us):4d} kernels, registers {min(regs)}..{max(regs)}, "
                     f"shared memory {max(u.smem for u in us)} bytes, spills {spills}")
    return "\n".join(lines)


# ---- the tier ---------------------------------------------------------------------------------------
def test_the_rosters_render_every_route_in_cuda() -> None:
    kinds = {k.route for k in roster_kernels()}
    assert kinds == {"naive", "tiled", "tc", "copy", "elementwise", "reduce", "cast", "gather", "concat", "where", "compare",
                     "random", "softmax", "norm", "rope", "place", "scatter_add", "optim_step"}
    assert kinds == set(R.routes()), "a route no roster renders"
    assert any(k.route == "tc" and len(k.buffer_names) > 3 for k in roster_kernels()), "no tc kernel with an epilogue"
    assert len(roster_kernels()) > 300


@pytest.mark.parametrize("arch", ARCHS)
def test_nvcc_and_ptxas_compile_every_roster_kernel(arch: str, tmp_path: Path,
                                                    tmp_path_factory: pytest.TempPathFactory) -> None:
    kernels = roster_kernels()
    batch = Batch(kernels)
    ptx, problems = nvcc_ptx(batch, arch, tmp_path)
    assert not problems, problems.report(f"nvcc {arch}")
    missing = {k.name for k in kernels} - _entries(ptx)
    assert not missing, f"nvcc {arch}: no entry point for {sorted(missing)[:10]}"
    usage, problems = ptxas(ptx, arch, tmp_path)
    check_usage(kernels, usage, arch, problems)
    print("\n" + write_report(kernels, usage, arch, _report_dir(tmp_path_factory) / f"ptxas_{arch}.md"))
    assert not problems, problems.report(f"ptxas {arch}")


def test_nvrtc_compiles_every_roster_kernel() -> None:
    kernels = roster_kernels()
    ptx, problems = nvrtc_compile(Batch(kernels), NVRTC_OPTIONS)
    assert not problems, problems.report("nvrtc " + " ".join(NVRTC_OPTIONS))
    missing = {k.name for k in kernels} - _entries(ptx)
    assert not missing, f"nvrtc: no entry point for {sorted(missing)[:10]}"


# ---- the checks can fail ------------------------------------------------------------------------------
def _three_kernels() -> tuple[R.Kernel, ...]:
    with _zeros((40, 24)) as a, _zeros((24, 33)) as b:
        return tuple(R.render_matmul(a, b, route, "cuda") for route in MATMUL_ROUTES)


def _mutate(kernel: R.Kernel, old: str, new: str) -> R.Kernel:
    assert old in kernel.source
    return R.Kernel(**{**kernel.__dict__, "source": kernel.source.replace(old, new, 1)})


MUTANTS = {
    # a call to a helper that does not exist: an error
    "error": ("tg_mma_m16n8k16_bf16(acc[j]", "tg_mma_m16n8k16_bf17(acc[j]"),
    # a variable set and never read: a warning (#550-D)
    "warning": ("float acc[2][4];", "float acc[2][4];\n    int tg_never_read = 0;\n    tg_never_read = 1;"),
}


@pytest.mark.parametrize("kind", MUTANTS)
@pytest.mark.parametrize("compiler", ["nvcc", "nvrtc"])
def test_a_broken_kernel_fails_and_is_named(kind: str, compiler: str, tmp_path: Path) -> None:
    naive, tiled, tc = _three_kernels()
    bad = _mutate(tc, *MUTANTS[kind])
    batch = Batch((naive, bad, tiled))
    if compiler == "nvcc":
        _, problems = nvcc_ptx(batch, "sm_80", tmp_path)
    else:
        _, problems = nvrtc_compile(batch, NVRTC_OPTIONS)
    assert set(problems.by_kernel) == {tc.name}, problems.report(compiler)
    assert kind in " ".join(problems.by_kernel[tc.name])
    clean = Batch((naive, tc, tiled))
    _, none = nvcc_ptx(clean, "sm_80", tmp_path) if compiler == "nvcc" else nvrtc_compile(clean, NVRTC_OPTIONS)
    assert not none, none.report(compiler)


def test_a_spill_or_a_wrong_shared_memory_size_fails_and_is_named(tmp_path: Path) -> None:
    naive, tiled, tc = _three_kernels()
    ptx, problems = nvcc_ptx(Batch((naive, tc)), "sm_80", tmp_path)
    assert not problems
    usage, problems = ptxas(ptx, "sm_80", tmp_path, ("--maxrregcount", "32"))  # tc needs about 50
    wrong = R.Kernel(**{**naive.__dict__, "threadgroup_memory": 16})
    check_usage((wrong, tc), usage, "sm_80", problems)
    assert set(problems.by_kernel) == {tc.name, naive.name}, problems.report("ptxas")
    assert "spill stores" in problems.by_kernel[tc.name][0]
    assert "0 bytes of shared memory, the launch says 16" in problems.by_kernel[naive.name][0]
