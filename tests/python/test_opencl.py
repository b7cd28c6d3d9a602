"""The OpenCL backend on a real driver (PoCL in CI, which sets TGRAD_REQUIRE_OPENCL=1 so that a
missing backend fails instead of skipping): the conformance roster bit-exact on device="opencl"
for the naive and tiled routes, the copy kernel, the tc refusal, a broken kernel's build log as a
typed error, device choice, and a machine without OpenCL reporting the backend unavailable
without failing anything else. The backend interface itself is tested in tests/c/test_opencl.c."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad.conformance.oracle import f32_to_bf16_bits, matmul_bits
from tgrad.conformance.rosters import Case, build_operands, roster
from tgrad import errors
from tgrad import render as R
from tgrad._ffi import lib

CI_ROSTER = roster("ci")
ROUTES = {"naive": lib.TGRAD_ROUTE_NAIVE, "tiled": lib.TGRAD_ROUTE_TILED, "tc": lib.TGRAD_ROUTE_TC}


@contextmanager
def device_route(name: str) -> Iterator[None]:
    """Force the route GPU matmuls take (process-wide), and restore the default choice."""
    assert lib.tgrad_set_device_route(ROUTES[name]) == 0
    try:
        yield
    finally:
        lib.tgrad_set_device_route(0)


def _bits(t: tgrad.Tensor) -> np.ndarray:
    return t.numpy().view(np.uint16)


# ---- the roster -------------------------------------------------------------------------------
@pytest.mark.parametrize("route", ["naive", "tiled"])
@pytest.mark.parametrize("case", CI_ROSTER, ids=[c.id for c in CI_ROSTER])
def test_roster_case_is_bit_exact_on_opencl(case: Case, route: str, opencl_device: str) -> None:
    a_base, b_base, apply_view = build_operands(case)
    want = matmul_bits(np.asarray(apply_view(a_base, "a")).view(np.uint16),
                       np.asarray(apply_view(b_base, "b")).view(np.uint16))
    with tgrad.Tensor.from_numpy(a_base, device="opencl") as a0, \
            tgrad.Tensor.from_numpy(b_base, device="opencl") as b0, device_route(route):
        a, b = apply_view(a0, "a"), apply_view(b0, "b")  # views of device buffers, read in place
        try:
            with a @ b as c:
                assert c.device == "opencl" and c.route == f"opencl.{route}"
                got = _bits(c)
        finally:
            a.release()
            b.release()
    assert got.shape == want.shape
    bad = np.argwhere(got != want)
    assert bad.size == 0, (f"{len(bad)} of {want.size} outputs differ; first C{list(bad[0])}: "
                           f"got 0x{int(got[tuple(bad[0])]):04x}, want 0x{int(want[tuple(bad[0])]):04x}")


def check_default_routes(device: str) -> None:
    """The automatic route on a GPU device: tiled, and naive for at most four rows (a decoding
    step's products: one thread per output beats tiled's mostly empty 32-row tiles there; the
    same bytes, docs/cuda.md). test_cuda_device.py runs it on CUDA."""
    for rows, route in ((5, "tiled"), (4, "naive"), (1, "naive")):
        x = (np.arange(rows * 4) % 3).astype(np.float32).reshape(rows, 4)
        with tgrad.Tensor.from_numpy(x, device=device) as a, a @ a.T as c:
            assert c.route == f"{device}.{route}"
            assert np.array_equal(c.numpy().astype(np.float32), x @ x.T)  # small integers: exact


def test_the_default_route_on_opencl_is_tiled_and_naive_for_a_few_rows(opencl_device: str) -> None:
    check_default_routes("opencl")


def test_tc_is_refused_on_opencl_with_the_reason(opencl_device: str) -> None:
    # under the bounded policy, which allows tc at all: OpenCL C has no matrices
    x = np.ones((64, 64), np.float32)
    with tgrad.Tensor.from_numpy(x, device="opencl") as a, device_route("tc"), tgrad.matmul_precision("bounded"):
        with pytest.raises(errors.RouteNotEligibleError, match="opencl") as refused:
            with a @ a as c:
                c.realize()
    assert "precision" not in str(refused.value)


def test_the_precision_policy_on_opencl_keeps_tiled_and_says_so(opencl_device: str) -> None:
    x = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) % 7
    with tgrad.Tensor.from_numpy(x, device="opencl") as a, a @ a as c:
        assert c.route == "opencl.tiled"
        assert tgrad.explain(c, json=True)["steps"][0]["plan"] == "precision exact: tiled, the documented order's bytes"
        with tgrad.matmul_precision("bounded"):  # no matrix hardware here: tiled still
            assert c.route == "opencl.tiled"
            assert "precision bounded: tiled" in tgrad.explain(c)
            got = _bits(c)
    bits = f32_to_bf16_bits(x)
    assert np.array_equal(got, matmul_bits(bits, bits))
    with tgrad.Tensor.from_numpy(x, device="opencl") as a, device_route("tc"):
        with pytest.raises(errors.RouteNotEligibleError, match="opencl: route tc is bounded .* matmul precision is exact"):
            with a @ a as c:
                c.realize()


# ---- elementwise ops on device memory -----------------------------------------------------------
def _ew(op: str, *tensors: tgrad.Tensor) -> tgrad.Tensor:
    """The C call itself (the Python operators are tested in test_ops.py)."""
    from tgrad._ffi import ffi
    from tgrad.tensor import Tensor, _new_handle
    code = next(c for c in range(1, lib.tgrad_op_count() + 1) if ffi.string(lib.tgrad_op_name(c)).decode() == op)
    call = lib.tgrad_unary if len(tensors) == 1 else lib.tgrad_binary
    return Tensor._wrap(_new_handle(call, code, *(t._handle for t in tensors)))


def test_elementwise_ops_on_opencl_tensors_match_the_cpu_bytes(opencl_device: str) -> None:
    # a rendered elementwise kernel (integer ops and the gelu table), the broadcast operand's view
    # baked into it
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, 70)).astype(np.float32)
    b = rng.standard_normal(70).astype(np.float32)
    with tgrad.Tensor.from_numpy(x) as xc, tgrad.Tensor.from_numpy(b) as bc, \
            tgrad.Tensor.from_numpy(x, device="opencl") as xd, tgrad.Tensor.from_numpy(b, device="opencl") as bd:
        want = _ew("gelu", _ew("add", xc, bc)).numpy()
        got = _ew("gelu", _ew("add", xd, bd))
        assert got.route == "opencl.elementwise"
        assert "add+gelu opencl.elementwise" in got.explain()
        assert np.array_equal(got.numpy().view(np.uint16), want.view(np.uint16))
        with pytest.raises(errors.DeviceMismatchError, match="cpu and opencl"):
            _ew("add", xc, bd)


def test_the_new_table_ops_and_pow_on_opencl_match_the_cpu(opencl_device: str) -> None:
    # sqrt, log, log1p, sin, cos render as table reads (the CPU's tables); pow evaluates in
    # binary64 with a bound, as its own kernel (tests/python/test_gpu_transcendental_f32.py)
    x = np.random.default_rng(5).standard_normal((40, 60)).astype(np.float32) * 30
    chain = lambda t: tgrad.cos(tgrad.sin(tgrad.log1p(tgrad.log(tgrad.sqrt(t.abs())).abs())))  # noqa: E731
    with tgrad.Tensor.from_numpy(x) as xc, tgrad.Tensor.from_numpy(x, device="opencl") as xd:
        want = chain(xc).numpy().view(np.uint16)
        got = chain(xd)
        assert got.route == "opencl.elementwise"
        assert np.array_equal(got.numpy().view(np.uint16), want)
        for e in (2, 3, 0.5, -1.5):
            assert np.array_equal((xd ** e).numpy().view(np.uint16), (xc ** e).numpy().view(np.uint16)), e


@pytest.mark.parametrize("name", ["rsqrt_backward", "sqrt_backward", "sigmoid_backward", "tanh_backward",
                                  "gelu_backward", "gelu_tanh_backward", "silu_backward"])
def test_derivatives_give_the_cpu_bytes_on_opencl(name: str, opencl_device: str) -> None:
    """-g y^3 / 2, g / (2 y), g y (1 - y) and g (1 - y^2), exact in the prelude's integers, and
    g gelu'(x), g gelu_tanh'(x), g silu'(x), g times f'(x) read from the op's table (an interval
    with a 64-bit significand, kernels/gpu/elementwise.h): every bf16 first operand against random
    g, every g against random first operands, and every special value against every other, on the
    device as on the CPU; float32 operands the CPU's bytes too (binary64 with a bound)."""
    rng = np.random.default_rng(8)
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    specials = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x3f80, 0xbf80, 0x7f7f, 0xff7f,
                         0x7f80, 0xff80, 0x7fc0, 0xffc1, 0xc2c8, 0x3fb3, 0x2000, 0xa000], np.uint16)
    sy, sg = np.meshgrid(specials, specials)
    y = np.concatenate([every, rng.integers(0, 1 << 16, every.size).astype(np.uint16), sy.ravel()])
    g = np.concatenate([rng.integers(0, 1 << 16, every.size).astype(np.uint16), every, sg.ravel()])
    op = getattr(tgrad, name)
    want = op(tgrad.Tensor.from_bf16_bits(y), tgrad.Tensor.from_bf16_bits(g)).numpy().view(np.uint16)
    got = op(tgrad.Tensor.from_bf16_bits(y).to("opencl"), tgrad.Tensor.from_bf16_bits(g).to("opencl"))
    assert got.route == "opencl.elementwise"
    assert np.array_equal(got.numpy().view(np.uint16), want)
    f32 = (np.random.default_rng(9).standard_normal((4, 5)) * 0.7).astype(np.float32)
    with tgrad.Tensor.from_numpy(f32, dtype=tgrad.float32, device="opencl") as fd, \
            tgrad.Tensor.from_numpy(f32, dtype=tgrad.float32) as fc:
        # binary64 with a bound (tests/python/test_gpu_transcendental_f32.py has the rest)
        assert np.array_equal(op(fd, fd).numpy().view(np.uint32), op(fc, fc).numpy().view(np.uint32))


@pytest.mark.parametrize("name", ["gelu_backward", "silu_backward"])
def test_a_table_derivative_fused_after_a_product_gives_the_cpu_bytes_on_opencl(name: str, opencl_device: str) -> None:
    # the derivative op in a matmul's epilogue, the product as x and then as g (the operand is x),
    # with a second table derivative after it: each op binds its operand and its table of f'(x)
    rng = np.random.default_rng(9)
    a, w, o = (rng.standard_normal(s).astype(np.float32) for s in ((33, 40), (40, 24), (33, 24)))
    op = getattr(tgrad, name)
    chain = lambda a, w, o: tgrad.gelu_tanh_backward(op(a @ w, o), op(o, a @ w))  # noqa: E731
    want = chain(*(tgrad.Tensor.from_numpy(t) for t in (a, w, o))).numpy().view(np.uint16)
    got = chain(*(tgrad.Tensor.from_numpy(t, device="opencl") for t in (a, w, o)))
    assert np.array_equal(got.numpy().view(np.uint16), want)


@pytest.mark.parametrize("name", ["gelu_backward", "gelu_tanh_backward", "silu_backward"])
def test_a_table_derivative_runs_on_opencl_exactly_where_the_build_makes_its_table(name: str, opencl_device: str) -> None:
    # the table of f'(x) is built in binary128 (libquadmath): without it the op is refused on the
    # device with the reason (docs/kernels.md), with it the device gives the CPU's bytes
    try:
        R.device_table(name)
        made = True
    except errors.RouteNotEligibleError as exc:
        assert "binary128" in str(exc)
        made = False
    x = np.linspace(-6, 6, 20, dtype=np.float32).reshape(4, 5)
    op = getattr(tgrad, name)
    with tgrad.Tensor.from_numpy(x, device="opencl") as xd, tgrad.Tensor.from_numpy(x) as xc:
        y = op(xd, xd)
        if made:
            assert np.array_equal(y.numpy().view(np.uint16), op(xc, xc).numpy().view(np.uint16))
        else:
            with pytest.raises(errors.RouteNotEligibleError, match="built in binary128, which this build lacks"):
                y.realize()


def test_a_chain_with_every_table_derivative_binds_within_the_launch_limit_on_opencl(opencl_device: str) -> None:
    # a product with 8 fused ops, the three table derivatives among them: 3 + 8 operands + 3 tables
    # of f'(x) = 14 buffers (TGRAD_LAUNCH_MAX_BUFFERS is 16), one kernel, the CPU's bytes
    rng = np.random.default_rng(10)
    a, w = rng.standard_normal((9, 12)).astype(np.float32), rng.standard_normal((12, 7)).astype(np.float32)
    ops = [rng.standard_normal((9, 7)).astype(np.float32) for _ in range(8)]

    def chain(a, w, o):
        y = tgrad.silu_backward(tgrad.gelu_backward(a @ w, o[0]), o[1])
        y = tgrad.gelu_tanh_backward(o[2], y) + o[3]
        return tgrad.maximum((y * o[4] - o[5]) / o[6], o[7])

    want = chain(*(tgrad.Tensor.from_numpy(t) for t in (a, w)), [tgrad.Tensor.from_numpy(t) for t in ops])
    got = chain(*(tgrad.Tensor.from_numpy(t, device="opencl") for t in (a, w)),
                [tgrad.Tensor.from_numpy(t, device="opencl") for t in ops])
    assert len(got.explain(json=True)["steps"]) == 1
    names = R.render_tensor(got, lang="opencl").buffer_names
    assert len(names) == 14 and sum(n.startswith("t") for n in names) == 3, names
    assert np.array_equal(got.numpy().view(np.uint16), want.numpy().view(np.uint16))


def _linear(x: tgrad.Tensor, w: tgrad.Tensor, b: tgrad.Tensor) -> tgrad.Tensor:
    return tgrad.silu(tgrad.gelu(x @ w.T + b) * b - 0.25)


@pytest.mark.parametrize("route", ["naive", "tiled"])
def test_a_fused_layer_on_opencl_gives_the_cpu_bytes_fused_or_not(route: str, opencl_device: str) -> None:
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((37, 70)).astype(np.float32), rng.standard_normal((45, 70)).astype(np.float32)
    b = rng.standard_normal(45).astype(np.float32)
    want = _linear(*(tgrad.Tensor.from_numpy(v) for v in (x, w, b))).numpy().view(np.uint16)
    saved = tgrad.fusion_enabled()
    try:
        with device_route(route):
            for fusion in (True, False):
                tgrad.set_fusion(fusion)
                y = _linear(*(tgrad.Tensor.from_numpy(v, device="opencl") for v in (x, w, b)))
                plan = y.explain()
                assert (f"matmul+add+gelu+mul+sub+silu opencl.{route}" in plan) == fusion, plan
                assert np.array_equal(y.numpy().view(np.uint16), want)
                y.release()
    finally:
        tgrad.set_fusion(saved)


def test_a_failed_allocation_in_a_fused_device_step_is_typed_and_changes_nothing(opencl_device: str) -> None:
    if lib.tgrad_debug_fail_allocation(0, tgrad.ffi.NULL) != 0:
        pytest.skip("libtgrad was built without fault injection")
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((9, 16)).astype(np.float32), rng.standard_normal((12, 16)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    want = tgrad.sigmoid(tgrad.Tensor.from_numpy(x) @ tgrad.Tensor.from_numpy(w).T + tgrad.Tensor.from_numpy(b))
    want_bits = want.numpy().view(np.uint16)
    with tgrad.Tensor.from_numpy(x, device="opencl") as xd, tgrad.Tensor.from_numpy(w, device="opencl") as wd, \
            tgrad.Tensor.from_numpy(b, device="opencl") as bd:
        failures = 0
        for n in range(1, 8):  # each allocation of the realize in turn: the output, the sigmoid table
            y = tgrad.sigmoid(xd @ wd.T + bd)
            lib.tgrad_debug_fail_allocation(n, tgrad.ffi.NULL)
            try:
                got = y.numpy().view(np.uint16)
            except errors.OutOfMemoryError:
                failures += 1
                assert y.explain().startswith("plan for"), "a failed realize leaves the tensor pending"
                continue
            finally:
                lib.tgrad_debug_fail_allocation(0, tgrad.ffi.NULL)
            assert np.array_equal(got, want_bits)
            break
        assert failures >= 1


# ---- the copy kernel ----------------------------------------------------------------------------
def _view_of(t: tgrad.Tensor, bits: np.ndarray, view: str) -> tuple[tgrad.Tensor, np.ndarray]:
    """A view strides cannot reshape (transposed, stepped backwards, permuted) and its bits."""
    if view == "transpose":
        return t.T, bits.T
    if view == "negstep":
        return t[::-1, 1::2], bits[::-1, 1::2]
    return t.permute(2, 0, 1), bits.transpose(2, 0, 1)


@pytest.mark.parametrize("view", ["transpose", "negstep", "permute3"])
def test_a_reshape_strides_cannot_express_runs_the_copy_kernel_on_the_device(view: str,
                                                                             opencl_device: str) -> None:
    gen = np.random.default_rng(3)
    base = gen.standard_normal((6, 10, 4) if view == "permute3" else (9, 13)).astype(ml_dtypes.bfloat16)
    bits = base.view(np.uint16)
    with tgrad.Tensor.from_numpy(base, device="opencl") as t:
        v, want = _view_of(t, bits, view)
        try:
            with v.reshape(-1) as flat:
                assert flat.device == "opencl" and flat.route == "opencl.copy"
                assert np.array_equal(_bits(flat), want.reshape(-1))
        finally:
            v.release()


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("view", ["transpose", "negstep", "permute3"])
def test_four_byte_views_copy_on_the_device_bit_for_bit(view: str, dtype: str, opencl_device: str) -> None:
    """float32 and int32 views materialize with the copy kernel's uint form (route copy), every bit
    kept: NaN payloads, signed zeros, subnormals."""
    gen = np.random.default_rng(4)
    bits = gen.integers(0, 2**32, (6, 10, 4) if view == "permute3" else (9, 13), dtype=np.uint64).astype(np.uint32)
    bits.reshape(-1)[:4] = [0x7FC01234, 0x80000000, 0x00000001, 0xFF800000]
    base = bits.view(np.float32 if dtype == "float32" else np.int32)
    with tgrad.Tensor.from_numpy(base, dtype=dtype, device="opencl") as t:
        v, want = _view_of(t, bits, view)
        try:
            with v.reshape(-1) as flat:
                assert flat.device == "opencl" and flat.route == "opencl.copy"
                assert np.array_equal(flat.to("cpu").numpy().view(np.uint32), want.reshape(-1))
        finally:
            v.release()


# ---- errors and device choice: one process each (the device is chosen once per process) ---------
_PROBE = r"""
import json, sys
import numpy as np
import tgrad
from tgrad import errors
row = next(b for b in tgrad.backends() if b.name == "opencl")
out = {"built": row.built, "available": row.available, "device": row.device}
try:
    a = tgrad.Tensor.from_numpy(np.ones((8, 8), np.float32), device="opencl")
    with a @ a as c:
        out["result"] = c.numpy().astype(np.float32).tolist()[0][:2]
    a.release()
except tgrad.TgradError as exc:
    out["error"], out["code"], out["message"] = type(exc).__name__, exc.code, str(exc)
# The CPU is unaffected either way.
with tgrad.Tensor.from_numpy(np.eye(3, dtype=np.float32)) as e, e @ e as f:
    out["cpu_ok"] = bool(np.array_equal(f.numpy().astype(np.float32), np.eye(3)))
print(json.dumps(out))
"""


def _probe(**env: str) -> dict[str, object]:
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, env=full)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_a_broken_kernel_reaches_the_user_as_kernel_compile_failed_with_the_build_log(opencl_device: str) -> None:
    # Extra build options (a documented diagnostic knob) that turn every rendered kernel into
    # invalid OpenCL C: the driver's compiler rejects it and its log is the error's text.
    out = _probe(TGRAD_OPENCL_BUILD_OPTIONS="-D__kernel=tgrad_no_such_qualifier")
    assert out["error"] == "KernelCompileFailedError" and out["code"] == "kernel_compile_failed", out
    message = str(out["message"])
    assert "build log" in message and "tgrad_no_such_qualifier" in message, message
    assert out["cpu_ok"] is True


@pytest.mark.slow
def test_options_that_relax_fp_math_are_refused(opencl_device: str) -> None:
    out = _probe(TGRAD_OPENCL_BUILD_OPTIONS="-cl-fast-relaxed-math")
    assert out["available"] is False and "-cl-fast-relaxed-math" in str(out["device"])
    assert out["error"] == "BackendUnavailableError" and out["cpu_ok"] is True


@pytest.mark.slow
def test_without_an_opencl_loader_the_backend_is_unavailable_and_nothing_else_fails() -> None:
    out = _probe(TGRAD_OPENCL_LOADER="/nonexistent/libOpenCL.so.1")
    assert out["built"] is True and out["available"] is False
    assert "no OpenCL ICD loader" in str(out["device"]) and "TGRAD_OPENCL_LOADER" in str(out["device"])
    assert out["error"] == "BackendUnavailableError" and out["code"] == "backend_unavailable"
    assert "opencl" in str(out["message"])
    assert out["cpu_ok"] is True


@pytest.mark.slow
def test_a_machine_without_opencl_skips_the_conformance_run_and_claims_nothing() -> None:
    code = ("import json; from tgrad.conformance import runner; from tgrad.conformance.rosters import roster\n"
            "card = runner.run('opencl', cases=roster('ci')[:5])\n"
            "print(json.dumps([card['funnel'], card['claim_made'], card['cases'][0]['detail']]))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
               TGRAD_OPENCL_LOADER="/nonexistent/libOpenCL.so.1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    funnel, claim_made, detail = json.loads(proc.stdout.strip().splitlines()[-1])
    assert funnel["skipped"] == 5 and funnel["executed"] == 0 and claim_made is False
    assert detail.startswith("backend_unavailable: opencl: no OpenCL ICD loader")


@pytest.mark.slow
@pytest.mark.parametrize(("choice", "chosen"), [("0:0", True), ("no-such-device-anywhere", False), ("7:3", False)])
def test_the_device_is_chosen_by_index_or_name(choice: str, chosen: bool, opencl_device: str) -> None:
    out = _probe(TGRAD_OPENCL_DEVICE=choice)
    assert out["available"] is chosen, out
    if chosen:
        assert "result" in out and out["result"] == [8.0, 8.0]
    else:
        assert f"TGRAD_OPENCL_DEVICE={choice} matches no device" in str(out["device"])
        assert out["error"] == "BackendUnavailableError"


@pytest.mark.slow
def test_the_device_can_be_named_by_any_part_of_its_name(opencl_device: str) -> None:
    platform, _, device = opencl_device.partition(" / ")
    for part in (platform[2:8].upper(), device[-6:].lower()):
        out = _probe(TGRAD_OPENCL_DEVICE=part)
        assert out["available"] is True, (part, out)


def test_an_empty_sum_with_an_epilogue_applies_it_to_the_zeros(opencl_device: str) -> None:
    # K = 0: without fused ops the zeros are written without a launch; with them the kernel runs
    # (its empty operands bound to the output, never read through them) and the epilogue applies
    x, w, b = np.zeros((9, 0), np.float32), np.zeros((0, 12), np.float32), np.arange(12, dtype=np.float32) - 6
    want = np.broadcast_to(np.maximum(b, 0), (9, 12))
    y = (tgrad.Tensor.from_numpy(x, device="opencl") @ tgrad.Tensor.from_numpy(w, device="opencl")
         + tgrad.Tensor.from_numpy(b, device="opencl")).relu()
    assert "matmul+add+relu opencl." in y.explain()
    assert np.array_equal(y.numpy().astype(np.float32), want)
