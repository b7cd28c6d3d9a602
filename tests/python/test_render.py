"""Kernel generation through the ABI: names from the declarations, deterministic text and its
hash, views baked into index expressions, launch geometry, eligibility, argument checks, the
OpenCL spelling, golden renders, and ``python -m tgrad render``.

Golden renders live in tests/golden/ (what ``python -m tgrad render`` prints: source plus launch
geometry). A change in generated text must be a reviewed change: regenerate with
``TGRAD_REGEN_GOLDEN=1 pytest tests/python/test_render.py`` and commit the diff.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad import render as R
from tgrad._ffi import ffi, lib

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
ROUTES_H = ROOT / "kernels" / "routes.h"


def zeros(*shape: int) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(np.zeros(shape, np.float32))


def fnv1a64(text: str) -> int:
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def index_line(source: str, operand: str) -> str:
    m = re.search(rf"^// {operand}\[\w, \w\] = {operand}\[(.*)\]$", source, re.M)
    assert m, f"no index comment for {operand}"
    return m.group(1)


# ---- names and declarations ----------------------------------------------------------------------
def test_route_names_and_codes_come_from_the_declarations() -> None:
    declared = re.findall(r"X\(TGRAD_ROUTE_(\w+), (\w+),", ROUTES_H.read_text())
    assert [name for _, name in declared] == R.routes() == ["naive", "tiled", "tc", "copy", "elementwise", "reduce", "cast", "gather", "concat", "where", "compare", "random", "softmax", "norm", "rope",
                                                                     "place", "scatter_add", "optim_step"]
    for upper, name in declared:
        assert upper.lower() == name
        assert ffi.string(lib.tgrad_route_name(getattr(lib, f"TGRAD_ROUTE_{upper}"))).decode() == name
    assert len(declared) == lib.TGRAD_ROUTE_COUNT
    for bad in (0, -1, lib.TGRAD_ROUTE_COUNT + 1, 2**31 - 1):
        assert lib.tgrad_route_name(bad) == ffi.NULL
    assert R.langs() == ["msl", "opencl", "cuda"]
    assert lib.tgrad_lang_name(0) == ffi.NULL and lib.tgrad_lang_name(4) == ffi.NULL


def test_launch_struct_in_the_cdef_matches_the_header(tmp_path: Path) -> None:
    # test_cdef compares functions, typedefs, enums and constants; the struct's fields are here.
    from pycparser import c_ast, c_generator, c_parser  # type: ignore[import-untyped, unused-ignore]
    from test_cdef import FAKE_STDDEF, FAKE_STDINT, load_cdef, preprocess

    def fields(text: str) -> list[str]:
        for ext in c_parser.CParser().parse(text).ext:
            if (isinstance(ext, c_ast.Decl) and isinstance(ext.type, c_ast.Struct) and ext.type.name == "tgrad_launch"
                    and ext.type.decls is not None):  # the definition, not a forward declaration
                return [c_generator.CGenerator().visit(d) for d in ext.type.decls]
        raise AssertionError("struct tgrad_launch not found")

    header = fields(preprocess('#include "tgrad.h"\n', tmp_path))
    cdef = "\n".join(line for line in load_cdef().splitlines() if not line.lstrip().startswith("#"))
    assert header == fields(FAKE_STDDEF + FAKE_STDINT + cdef)
    assert "uint64_t buffer_elements[16]" in header and "char kernel_name[64]" in header
    assert "char buffer_names[16][8]" in header


# ---- determinism, hashing, views ---------------------------------------------------------------------
def test_the_same_problem_renders_the_same_bytes_and_hash() -> None:
    with zeros(40, 30) as a, zeros(30, 20) as b:
        first = {route: R.render_matmul(a, b, route) for route in ("naive", "tiled", "tc")}
        again = {route: R.render_matmul(a[:, :], b, route) for route in ("naive", "tiled", "tc")}
    for route, k in first.items():
        assert k == again[route]
        assert k.source_hash == fnv1a64(k.source)
        order = "_block32" if route != "tc" and tgrad.get_matmul_order() == "block32" else ""
        assert k.name in k.source and k.name.startswith(f"tgrad_{route}{order}_40x30x20_")
    assert len({k.source_hash for k in first.values()}) == 3


def test_views_are_baked_into_index_expressions() -> None:
    with zeros(8, 12) as base, zeros(12, 8) as base_t, zeros(1, 6) as row:
        cases = {
            "plain": (base, "m * 12 + k"),
            "transpose": (base_t.T, "m + k * 8"),
            "slice2": (base[::2, ::2], "m * 24 + k * 2"),
            "slice_offset": (base[1:5, 2:8], "14 + m * 12 + k"),
            "negstep": (base[::-1, ::-1], "95 - m * 12 - k"),
            "negstep_transpose": (base_t[::-1, ::-1].T, "95 - m - k * 8"),
        }
        for name, (a, expected) in cases.items():
            k = a.shape[1]
            with zeros(k, 6) as b:
                assert index_line(R.render_matmul(a, b).source, "a") == expected, name
        expanded = row.expand(12, 6)
        assert index_line(R.render_matmul(base, expanded).source, "b") == "n"  # stride 0: no k term
        expanded.release()


def test_different_views_render_different_kernels() -> None:
    with zeros(16, 16) as a, zeros(16, 16) as b:
        kernels = [R.render_matmul(x, b) for x in (a, a.T, a[::-1], a[:, ::-1])]
    assert len({k.name for k in kernels}) == len({k.source_hash for k in kernels}) == 4


def test_launch_geometry() -> None:
    with zeros(33, 65) as a, zeros(65, 97) as b:
        naive, tiled, tc = (R.render_matmul(a, b, r) for r in ("naive", "tiled", "tc"))
        copy = R.render_copy(a.T)
    assert (naive.grid, naive.threadgroup, naive.threadgroup_memory) == ((7, 3, 1), (16, 16, 1), 0)
    assert (tiled.grid, tiled.threadgroup, tiled.threadgroup_memory) == ((4, 2, 1), (16, 16, 1), 4096)
    assert (tc.grid, tc.threadgroup, tc.threadgroup_memory) == ((4, 2, 1), (128, 1, 1), 8192)
    for k in (naive, tiled, tc):
        assert k.buffer_elements == (33 * 65, 65 * 97, 33 * 97)
        assert k.threadgroup_memory <= 32768  # Metal's threadgroup memory limit
    assert (copy.grid, copy.threadgroup, copy.buffer_elements) == ((9, 1, 1), (256, 1, 1), (33 * 65, 33 * 65))


def test_views_reading_part_of_a_buffer_declare_only_what_they_touch() -> None:
    with zeros(10, 10) as base, zeros(4, 3) as b:
        k = R.render_matmul(base[1:3, 2:6], b)  # rows 1-2, columns 2-5: last element 2*10+5
    assert k.buffer_elements[0] == 26


def test_empty_problems_have_nothing_to_dispatch() -> None:
    with zeros(0, 5) as a, zeros(5, 3) as b, zeros(4, 0) as a0, zeros(0, 3) as b0:
        assert 0 in R.render_matmul(a, b, "tiled").grid
        k = R.render_matmul(a0, b0, "tiled")  # K = 0: a kernel writing zeros
        assert k.grid == (1, 1, 1) and k.buffer_elements == (0, 0, 12)
        assert R.render_copy(a).grid[0] == 0


def test_indices_widen_to_64_bits_when_a_buffer_needs_it() -> None:
    small = R.render_matmul(R._placeholder(64, 64), R._placeholder(64, 64))
    assert "const int m0" in small.source and "long" not in small.source
    big_a = R._placeholder(50000, 50000)  # lazy: 2.5e9 elements, never allocated
    with zeros(50000, 2) as b:
        big = R.render_matmul(big_a, b, "tiled")
        assert big_a.is_realized is False
    assert "const long m0" in big.source and big.buffer_elements[0] == 50000 * 50000
    big_a.release()


def test_lazy_operands_render_without_being_computed() -> None:
    with zeros(8, 8) as x:
        lazy = x @ x
        R.render_matmul(lazy, lazy.T, "tc")
        R.render_copy(lazy.T)
        assert not lazy.is_realized
        lazy.release()


# ---- eligibility and errors ----------------------------------------------------------------------------
def test_tc_needs_eight_in_every_dimension_and_simdgroup_matrices() -> None:
    with zeros(8, 7) as a, zeros(7, 8) as b, zeros(8, 8) as c:
        with pytest.raises(errors.RouteNotEligibleError, match=r"needs M >= 8, K >= 8, N >= 8 .*tiled takes every shape"):
            R.render_matmul(a, b, "tc")
        R.route_check("tiled", a, b)
        R.route_check("tc", c, c)
        with pytest.raises(errors.RouteNotEligibleError, match="simdgroup matrices .* or warp-level bf16 mma.sync"):
            R.render_matmul(c, c, "tc", "opencl")
        R.route_check("tc", c, c)
        assert "mma.sync.aligned.m16n8k16" in R.render_matmul(c, c, "tc", "cuda").source
        with pytest.raises(errors.RouteNotEligibleError, match="needs M >= 8"):
            R.render_matmul(a, b, "tc", "cuda")
        with pytest.raises(errors.RouteNotEligibleError, match="not a matmul route"):
            R.render_matmul(c, c, "copy")
        R.route_check("copy", c)
        with pytest.raises(errors.InvalidArgumentError, match="one tensor"):
            R.route_check("copy", c, c)
        assert issubclass(errors.RouteNotEligibleError, ValueError)


def test_operand_checks_match_matmul() -> None:
    with zeros(4, 5) as a, zeros(6, 3) as b, zeros(5) as v:
        with pytest.raises(errors.ShapeMismatchError, match="inner dimensions 5 and 6 differ"):
            R.render_matmul(a, b)
        with pytest.raises(errors.RankMismatchError):
            R.render_matmul(v, b)
        with pytest.raises(errors.InvalidArgumentError, match="unknown route"):
            R.render_matmul(a, a.T, "fast")
        with pytest.raises(errors.InvalidArgumentError, match="unknown language"):
            R.render_matmul(a, a.T, "tiled", "ptx")


def _raw(call, *args):
    status = call(*args)
    return int(status), ffi.string(lib.tgrad_last_error()).decode()


def test_every_c_argument_is_checked_and_nothing_written_on_failure() -> None:
    length = ffi.new("size_t *", 12345)
    launch = ffi.new("struct tgrad_launch *")
    launch.size = ffi.sizeof("struct tgrad_launch")
    dst = ffi.new("char[]", b"Z" * 64)
    with zeros(16, 16) as a:
        h = a._h
        route, msl = lib.TGRAD_ROUTE_TILED, lib.TGRAD_LANG_MSL
        render = lib.tgrad_render_matmul
        assert _raw(render, route, msl, h, h, dst, 64, ffi.NULL, launch)[0] == lib.TGRAD_ERR_INVALID_ARGUMENT
        assert _raw(render, route, msl, h, h, ffi.NULL, 64, length, launch)[0] == lib.TGRAD_ERR_INVALID_ARGUMENT
        for bad_route in (0, lib.TGRAD_ROUTE_COUNT + 1, -3):
            assert _raw(render, bad_route, msl, h, h, ffi.NULL, 0, length, launch)[0] == lib.TGRAD_ERR_INVALID_ARGUMENT
        for not_matmul in (lib.TGRAD_ROUTE_COPY, lib.TGRAD_ROUTE_ELEMENTWISE):
            assert _raw(render, not_matmul, msl, h, h, ffi.NULL, 0, length, launch)[0] == lib.TGRAD_ERR_ROUTE_NOT_ELIGIBLE
        assert _raw(render, route, 9, h, h, ffi.NULL, 0, length, launch)[0] == lib.TGRAD_ERR_INVALID_ARGUMENT
        assert _raw(render, route, msl, 0, h, ffi.NULL, 0, length, launch)[0] == lib.TGRAD_ERR_INVALID_HANDLE
        assert _raw(render, route, msl, h, h ^ (1 << 40), ffi.NULL, 0, length, launch)[0] == lib.TGRAD_ERR_INVALID_HANDLE
        status, detail = _raw(render, route, msl, h, h, dst, 64, length, launch)
        assert status == lib.TGRAD_ERR_BUFFER_TOO_SMALL and "bytes plus its NUL" in detail
        assert ffi.string(dst) == b"Z" * 64 and length[0] == 12345 and launch.source_hash == 0
        assert _raw(render, route, msl, h, h, ffi.NULL, 0, length, ffi.NULL)[0] == lib.TGRAD_ERR_INVALID_ARGUMENT
        # the size query, then the render into exactly enough room
        assert _raw(render, route, msl, h, h, ffi.NULL, 0, length, launch)[0] == lib.TGRAD_OK
        n = int(length[0])
        assert launch.source_hash != 0 and n > 1000
        room = ffi.new("char[]", n + 1)
        assert _raw(render, route, msl, h, h, room, n, length, launch)[0] == lib.TGRAD_ERR_BUFFER_TOO_SMALL
        assert _raw(render, route, msl, h, h, room, n + 1, length, launch)[0] == lib.TGRAD_OK
        assert len(ffi.string(room)) == n and fnv1a64(ffi.string(room).decode()) == launch.source_hash
        copy = lib.tgrad_render_copy
        assert _raw(copy, msl, h, ffi.NULL, 0, ffi.NULL, launch)[0] == lib.TGRAD_ERR_INVALID_ARGUMENT
        assert _raw(copy, msl, h, ffi.NULL, 0, length, ffi.NULL)[0] == lib.TGRAD_ERR_INVALID_ARGUMENT
        assert _raw(copy, 0, h, ffi.NULL, 0, length, launch)[0] == lib.TGRAD_ERR_INVALID_ARGUMENT
        assert _raw(copy, msl, 0, ffi.NULL, 0, length, launch)[0] == lib.TGRAD_ERR_INVALID_HANDLE
        assert _raw(lib.tgrad_route_check, 0, msl, h, h)[0] == lib.TGRAD_ERR_INVALID_ARGUMENT
        assert _raw(lib.tgrad_route_check, route, msl, h, 0)[0] == lib.TGRAD_ERR_INVALID_HANDLE
    # a released handle is stale
    assert _raw(lib.tgrad_render_copy, msl, h, ffi.NULL, 0, length, launch)[0] == lib.TGRAD_ERR_INVALID_HANDLE
    assert _raw(lib.tgrad_render_tensor, 0, msl, h, -1, ffi.NULL, 0, length, launch)[0] == lib.TGRAD_ERR_INVALID_HANDLE



def test_a_launch_struct_without_its_size_is_refused_and_left_alone() -> None:
    # the struct may grow: a caller states the size it has, and the library writes no further
    length = ffi.new("size_t *", 12345)
    for size in (0, ffi.sizeof("struct tgrad_launch") - 1):
        launch = ffi.new("struct tgrad_launch *")
        launch.size = size
        with zeros(8, 8) as a:
            status, detail = _raw(lib.tgrad_render_matmul, lib.TGRAD_ROUTE_TILED, lib.TGRAD_LANG_MSL, a._h, a._h,
                                  ffi.NULL, 0, length, launch)
        assert status == lib.TGRAD_ERR_INVALID_ARGUMENT and "sizeof(struct tgrad_launch)" in detail
        assert launch.size == size and launch.source_hash == 0 and length[0] == 12345


def test_render_tensor_checks_its_arguments_and_writes_nothing_on_failure() -> None:
    length = ffi.new("size_t *", 12345)
    launch = ffi.new("struct tgrad_launch *")
    launch.size = ffi.sizeof("struct tgrad_launch")
    msl, render = lib.TGRAD_LANG_MSL, lib.tgrad_render_tensor
    with zeros(8, 8) as a:
        y = (a @ a).relu()
        h = y._h
        for bad in ((lib.TGRAD_ROUTE_COPY, msl, h, -1), (lib.TGRAD_ROUTE_ELEMENTWISE, msl, h, -1),
                    (99, msl, h, -1), (0, 9, h, -1), (0, msl, h, 1), (0, msl, h, -2)):
            status, detail = _raw(render, *bad, ffi.NULL, 0, length, launch)
            assert status == lib.TGRAD_ERR_INVALID_ARGUMENT, (bad, detail)
        assert length[0] == 12345 and launch.source_hash == 0
        assert _raw(render, 0, msl, 0, -1, ffi.NULL, 0, length, launch)[0] == lib.TGRAD_ERR_INVALID_HANDLE
        assert _raw(render, 0, msl, h, 0, ffi.NULL, 0, length, launch)[0] == lib.TGRAD_OK  # step 0 of 1
        y.numpy()  # realized: nothing left to render
        status, detail = _raw(render, 0, msl, h, -1, ffi.NULL, 0, length, launch)
        assert status == lib.TGRAD_ERR_INVALID_ARGUMENT and "realized" in detail
        y.release()


# ---- languages ---------------------------------------------------------------------------------------
def test_opencl_is_the_same_kernel_in_other_spellings() -> None:
    with zeros(33, 65) as a, zeros(65, 97) as b:
        for route in ("naive", "tiled"):
            msl, cl = R.render_matmul(a, b, route, "msl"), R.render_matmul(a, b, route, "opencl")
            assert "__kernel void" in cl.source and "__global const ushort *a" in cl.source
            assert "as_float(u)" in cl.source and "as_type" not in cl.source
            code = "\n".join(line for line in cl.source.splitlines() if not line.lstrip().startswith("//"))
            for msl_only in ("[[", "threadgroup", "device ", "metal_stdlib"):
                assert msl_only not in code
            assert (cl.grid, cl.threadgroup) == (msl.grid, msl.threadgroup)
        tiled = R.render_matmul(a, b, "tiled", "opencl").source
        assert tiled.count("barrier(CLK_LOCAL_MEM_FENCE);") == 2 and "__local float a_tile[16][32];" in tiled
        assert "get_group_id(1)" in tiled
        assert "__kernel void" in R.render_copy(a.T, "opencl").source


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (8, 8, 8), (33, 65, 97), (64, 16, 40)])
def test_cuda_renders_every_route_in_its_own_spellings(m: int, k: int, n: int) -> None:
    """CUDA C++ text without a compiler (the `cuda` tier compiles it: test_cuda_compile.py): entry
    points extern "C" __global__, helpers __device__, no MSL or OpenCL spelling, no header, and the
    tc route on mma.sync with bf16 tiles (2 KiB of shared memory)."""
    with zeros(m, k) as a, zeros(k, n) as b:
        routes = ("naive", "tiled") + (("tc",) if min(m, k, n) >= 8 else ())
        kernels = [R.render_matmul(a, b, route, "cuda") for route in routes]
        msl = {route: R.render_matmul(a, b, route, "msl") for route in routes}
        kernels.append(R.render_copy(a.T, "cuda"))
        with (a * 0.5).maximum(a) as y:
            kernels.append(R.render_tensor(y, lang="cuda"))
    assert [kern.route for kern in kernels] == [*routes, "copy", "elementwise"]
    for kern in kernels:
        src = kern.source
        code = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("//"))
        assert kern.lang == "cuda" and f'extern "C" __global__ void {kern.name}(' in src
        assert "__device__ __forceinline__" in code and "static inline" not in code
        for foreign in ("[[", "threadgroup", "device ", "metal_stdlib", "#include", "__kernel", "__global ", "__local",
                        "get_group_id", "as_type", " as_float(", "(as_float(", "barrier(", "simdgroup"):
            assert foreign not in code, (kern.route, foreign)
        assert code.count("{") == code.count("}")
        if kern.route in msl:
            assert (kern.grid, kern.threadgroup) == (msl[kern.route].grid, msl[kern.route].threadgroup)
    by_route = {kern.route: kern for kern in kernels}
    tiled = by_route["tiled"]
    assert "__shared__ float a_tile[16][32];" in tiled.source and tiled.source.count("__syncthreads();") == 2
    assert tiled.threadgroup_memory == 4096
    if "tc" in by_route:
        tc = by_route["tc"]
        assert tc.threadgroup == (128, 1, 1) and tc.threadgroup_memory == 2048
        assert "__shared__ ushort a_tile[32][16];" in tc.source and "__shared__ ushort b_tile[16][32];" in tc.source
        assert tc.source.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == 1
        assert ("__device__ __forceinline__ void tg_mma_m16n8k16_bf16(float *d, uint a0, uint a1, uint a2, uint a3, "
                "uint b0, uint b1) {") in tc.source
        assert "tg_mma_m16n8k16_bf16(acc[j], a0, a1, a2, a3, b0, b1);" in tc.source
        assert "v = tg_daz_bf16(a[" in tc.source and "tg_load_bf16" not in tc.source
        assert "// fp32 accumulation in bf16 mma.sync m16n8k16 tiles" in tc.source


# ---- golden renders -----------------------------------------------------------------------------------
def _golden_cases():
    def plain(route, m, k, n, lang="msl"):
        with zeros(m, k) as a, zeros(k, n) as b:
            return R.render_matmul(a, b, route, lang)

    def naive_transposed_a(lang="msl"):
        with zeros(7, 5) as base, zeros(7, 3) as b:
            return R.render_matmul(base.T, b, "naive", lang)

    def tiled_views_opencl():
        with zeros(66, 194) as base, zeros(1, 97) as row:
            a, b = base[::2, ::3][:, :65], row.expand(65, 97)
            kernel = R.render_matmul(a, b, "tiled", "opencl")
            a.release(), b.release()
            return kernel

    def copy_negstep_transpose(lang="msl"):
        with zeros(4, 6) as base:
            view = base[::-1, ::-1].T
            kernel = R.render_copy(view, lang)
            view.release()
            return kernel

    def fused(route, lang, ops):
        # x @ w.T + bias, then the ops: every route's one store step with the epilogue plugged in
        with zeros(48, 40) as x, zeros(24, 40) as w, zeros(24, 1) as b:
            bias = b.reshape(24)
            y = x @ w.T
            for op in ops:
                y = tgrad.ops.apply(op, y, bias) if tgrad.ops.REGISTRY[op].arity == 2 else tgrad.ops.apply(op, y)
            kernel = R.render_tensor(y, route, lang)
            y.release(), bias.release()
            return kernel

    def elementwise_chain(lang):
        # (x.T * row + 0.5).gelu_tanh() over views: a transposed operand, a broadcast row, a 0-d number
        with zeros(7, 5) as base, zeros(1, 7) as row:
            y = tgrad.gelu(base.T * row.reshape(7) + 0.5, approximate="tanh").maximum(row.reshape(7))
            kernel = R.render_tensor(y, lang=lang)
            y.release()
            return kernel

    def elementwise_f32(lang):
        # float32 x.T / row (a transposed operand, a broadcast row): kernels/gpu/elementwise_f32.h
        f32 = lambda *shape: tgrad.Tensor.from_numpy(np.zeros(shape, np.float32), dtype=tgrad.float32)
        with f32(7, 5) as base, f32(7) as row:
            y = base.T / row
            kernel = R.render_tensor(y, lang=lang)
            y.release()
            return kernel

    def pairwise(make):
        # the pairwise order's kernels (0.1's default); the others render in block32, the default
        with tgrad.matmul_order("pairwise"):
            return make()

    return {
        "tiled_48x40x24_add_gelu.metal": lambda: fused("tiled", "msl", ["add", "gelu"]),
        "tc_48x40x24_mul_silu_sub.metal": lambda: fused("tc", "msl", ["mul", "silu", "sub"]),
        "naive_48x40x24_add_relu_div.cl": lambda: fused("naive", "opencl", ["add", "relu", "div"]),
        # a derivative op reading its table of f'(x) (t1) beside its operand (e1)
        "naive_48x40x24_add_silu_backward.cl": lambda: fused("naive", "opencl", ["add", "silu_backward"]),
        "tiled_48x40x24_gelu_backward.metal": lambda: fused("tiled", "msl", ["gelu_backward"]),
        "elementwise_5x7_chain.metal": lambda: elementwise_chain("msl"),
        "elementwise_5x7_chain.cl": lambda: elementwise_chain("opencl"),
        "tiled_64x64x64.metal": lambda: plain("tiled", 64, 64, 64),
        "tc_64x64x64.metal": lambda: plain("tc", 64, 64, 64),
        "naive_5x7x3_transposed_a.metal": naive_transposed_a,
        "tiled_33x65x97_slice_expand.cl": tiled_views_opencl,
        "copy_6x4_negstep_transpose.metal": copy_negstep_transpose,
        # CUDA C++: every route, the tc one on mma.sync (render_tc_cuda.c)
        "naive_5x7x3_transposed_a.cu": lambda: naive_transposed_a("cuda"),
        "tiled_48x40x24_add_gelu.cu": lambda: fused("tiled", "cuda", ["add", "gelu"]),
        "tc_64x64x64.cu": lambda: plain("tc", 64, 64, 64, "cuda"),
        "tc_48x40x24_mul_silu_sub.cu": lambda: fused("tc", "cuda", ["mul", "silu", "sub"]),
        "copy_6x4_negstep_transpose.cu": lambda: copy_negstep_transpose("cuda"),
        "elementwise_5x7_chain.cu": lambda: elementwise_chain("cuda"),
        "elementwise_f32_5x7_div.metal": lambda: elementwise_f32("msl"),
        "elementwise_f32_5x7_div.cu": lambda: elementwise_f32("cuda"),
        "pairwise_tiled_64x64x64.metal": lambda: pairwise(lambda: plain("tiled", 64, 64, 64)),
        "pairwise_naive_48x40x24_add_relu_div.cl": lambda: pairwise(lambda: fused("naive", "opencl", ["add", "relu", "div"])),
        "pairwise_tiled_48x40x24_add_gelu.cu": lambda: pairwise(lambda: fused("tiled", "cuda", ["add", "gelu"])),
    }


@pytest.mark.parametrize("name", list(_golden_cases()))
def test_render_matches_its_golden_file(name: str) -> None:
    kernel = _golden_cases()[name]()
    text = kernel.source + "\n" + kernel.describe()
    path = GOLDEN / name
    if os.environ.get("TGRAD_REGEN_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    expected = path.read_text()
    diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), str(path), "rendered"))
    assert text == expected, f"generated text changed (TGRAD_REGEN_GOLDEN=1 to accept):\n{diff}"


# ---- the command line -----------------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tgrad", "render", *args], capture_output=True, text=True,
                          check=False)


@pytest.mark.slow
def test_cli_prints_source_and_launch_geometry() -> None:
    result = _cli("--shape", "64x64x64")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (GOLDEN / "tiled_64x64x64.metal").read_text()
    tc = _cli("--shape", "8192x8192x8192", "--route", "tc")  # placeholders: nothing is allocated
    assert tc.returncode == 0, tc.stderr
    assert "// grid: 256 x 256 x 1 threadgroups" in tc.stdout and "simdgroup_multiply_accumulate" in tc.stdout


@pytest.mark.slow
def test_cli_renders_a_fused_group() -> None:
    out = _cli("--shape", "32x48x16", "--epilogue", "add,gelu", "--lang", "opencl")
    assert out.returncode == 0, out.stderr
    assert "v = tg_bf_add(v, e0[n]);" in out.stdout and "v = t1[v]; // gelu" in out.stdout
    assert "// buffers: a >= 1536 elements, b >= 768 elements, c >= 512 elements, e0 >= 16 elements, " \
           "t1 >= 65536 elements" in out.stdout
    alone = _cli("--shape", "32x48x16", "--route", "elementwise", "--epilogue", "silu,mul")
    assert alone.returncode == 0 and "kernel void tgrad_elementwise_512_" in alone.stdout
    bad = _cli("--shape", "32x48x16", "--epilogue", "add,nosuchop")
    assert bad.returncode == 2 and "nosuchop" in bad.stderr


@pytest.mark.slow
def test_cli_transposes_and_languages() -> None:
    out = _cli("--shape", "32x48x16", "--transpose-a", "--transpose-b", "--route", "naive", "--lang", "opencl")
    assert out.returncode == 0, out.stderr
    assert index_line(out.stdout, "a") == "m + k * 32" and index_line(out.stdout, "b") == "k + n * 48"
    copy = _cli("--shape", "5x7x3", "--route", "copy", "--transpose-a")
    assert copy.returncode == 0 and "dst[i] = src[" in copy.stdout


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [
    (["--shape", "4x4x4", "--route", "tc"], "route_not_eligible"),
    (["--shape", "64x64x64", "--route", "tc", "--lang", "opencl"], "route_not_eligible"),
    (["--shape", "64x64"], "expected MxKxN"),
    (["--shape", "64x64x64", "--route", "fast"], "invalid choice"),
])
def test_cli_refuses_bad_input_with_status_2(args: list[str], message: str) -> None:
    result = _cli(*args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
