"""float32 transcendental ops on the GPU routes (issue 37): exp, log, log1p, sin, cos, tanh, sigmoid,
silu, gelu and gelu_tanh on float32 tensors of a device render as a float32 elementwise kernel that
evaluates the op in binary64 with a bound (kernels/gpu/transcendental_f32.h: native doubles in
OpenCL C and CUDA, the software double in MSL). An element the bound decides is the correctly
rounded float32; the others are flagged and the host recomputes them with the CPU's code. So every
element is the CPU's bytes (src/ops/elementwise_f32.c).

- PoCL (device="opencl"): each op on drawn bit patterns (NaNs, infinities, subnormals, every binade),
  on values of every scale a model has and around each op's thresholds, plain and through reversed
  and transposed views; subnormal inputs are left to the host, and its count moves by them.
- The rendered text in MSL, OpenCL C and CUDA: the op's function and the flags binding.
- The emulators (MSL: slow tier; CUDA: cuda tier): every decided element is the CPU's, with fp32
  subnormals flushed or not; a kernel whose fallback is never taken (the interval's lower end
  rounded and kept) is caught on inputs whose exact value lies just past a rounding midpoint.
- The derivative ops sigmoid_backward, tanh_backward, rsqrt_backward, sqrt_backward,
  silu_backward, gelu_backward and gelu_tanh_backward the same way (an unusual operand or a zero result is the
  host's), and a float32 parameter trained on PoCL through every op ends with the CPU's bytes.
- pow in float32 and in bfloat16 the same way (negative bases with integer exponents signed, NaN
  for the others; NaN, infinite, zero, subnormal and unit operands the host's), a kernel of its
  own on the device where the CPU fuses it.
- Every op of the registry is made in float32 on a device (none is refused any more).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tgrad
from tgrad import render as R
from tgrad._ffi import ffi, lib
from emulators import emulator
from test_gpu_elementwise_f32 import pairs

OPS = ["exp", "log", "log1p", "sin", "cos", "tanh", "sigmoid", "silu", "gelu", "gelu_tanh"]
GRADS = ["sigmoid_backward", "tanh_backward", "rsqrt_backward", "sqrt_backward", "silu_backward", "gelu_backward",
         "gelu_tanh_backward"]
THRESHOLDS = {"exp": [88.72, -87.3, -103.9], "log": [1.0, 0.5], "log1p": [-0.29, 0.41, -1.0],
              "sin": [0.75, np.pi], "cos": [0.75, np.pi / 2], "tanh": [0.0625, -0.0625],
              "sigmoid": [0.0, -103.9], "silu": [-120.0, -87.0], "gelu": [-15.0, -2.1213203, -0.75],
              "gelu_tanh": [-12.0, -9.6]}


def _f32(bits: np.ndarray, device: str = "cpu") -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(np.ascontiguousarray(bits).view(np.float32), dtype=tgrad.float32, device=device)


def _bits(t: tgrad.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.numpy()).view(np.uint32)


def inputs(name: str, seed: int = 0) -> np.ndarray:
    """float32 bits: drawn patterns of every kind, values of every scale, each threshold's neighbours."""
    rng = np.random.default_rng(seed)
    a, b = pairs(seed, 2048)
    scales = np.concatenate([rng.standard_normal(512) * s for s in (1e-3, 0.1, 1.0, 4.0, 30.0, 300.0)])
    near = [np.float32(t).view(np.uint32) + np.arange(-64, 64, dtype=np.int64) for t in THRESHOLDS[name]]
    return np.concatenate([a, b, scales.astype(np.float32).view(np.uint32),
                           *[n.astype(np.uint32) for n in near]]).astype(np.uint32)


def device_host(name: str, bf16: bool = False) -> int:
    """Op `name`'s elements a GPU kernel left to the host so far (float32's count, or bf16's)."""
    counts = ffi.new("int64_t[]", int(lib.TGRAD_DEBUG_F32_COUNT))
    read = lib.tgrad_debug_bf16_slow_path if bf16 else lib.tgrad_debug_f32_slow_path
    assert read(tgrad.ops.REGISTRY[name].code, counts, int(lib.TGRAD_DEBUG_F32_COUNT)) == 0
    return int(counts[int(lib.TGRAD_DEBUG_F32_DEVICE_HOST)])


def _differ(got: np.ndarray, want: np.ndarray, x: np.ndarray) -> str:
    bad = np.flatnonzero(got.ravel() != want.ravel())
    if not bad.size:
        return ""
    i = int(bad[0])
    return f"{bad.size} of {want.size} differ; first x {int(x.ravel()[i]):08x}: cpu {int(want.ravel()[i]):08x} " \
           f"gpu {int(got.ravel()[i]):08x}"


# ---- PoCL ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", OPS)
def test_pocl_transcendentals_give_the_cpu_float32_bytes(name: str, opencl_device: str) -> None:
    x = inputs(name, len(name))
    want = _bits(tgrad.ops.apply(name, _f32(x)))
    y = tgrad.ops.apply(name, _f32(x, "opencl"))
    assert y.device == "opencl" and y.dtype == tgrad.float32 and "opencl.elementwise" in y.explain()
    assert not _differ(_bits(y), want, x), f"{name}: {_differ(_bits(y), want, x)}"
    # through views: reversed, and a transposed 2-D one
    m = x[: (x.size // 64) * 64]
    xc, xg = _f32(m).reshape(64, -1), _f32(m, "opencl").reshape(64, -1)
    for view in (lambda t: t.transpose(0, 1), lambda t: t[::-1, ::2]):
        got, want = _bits(tgrad.ops.apply(name, view(xg))), _bits(tgrad.ops.apply(name, view(xc)))
        assert np.array_equal(got, want), name


def cotangents(n: int, seed: int) -> np.ndarray:
    """float32 bits: mostly normal values of moderate size, one in eight any pattern."""
    rng = np.random.default_rng(seed)
    g = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(np.float32).view(np.uint32)
    wild = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    return np.where(rng.random(n) < 0.125, wild, g).astype(np.uint32)


@pytest.mark.parametrize("name", GRADS)
def test_pocl_derivative_ops_give_the_cpu_float32_bytes(name: str, opencl_device: str) -> None:
    x = inputs(name.replace("_backward", "") if name.replace("_backward", "") in THRESHOLDS else "tanh", len(name))
    g = cotangents(x.size, len(name))
    want = _bits(tgrad.ops.apply(name, _f32(x), _f32(g)))
    y = tgrad.ops.apply(name, _f32(x, "opencl"), _f32(g, "opencl"))
    assert y.device == "opencl" and "opencl.elementwise" in y.explain()
    assert not _differ(_bits(y), want, x), f"{name}: {_differ(_bits(y), want, x)}"
    # g broadcast along a transposed x
    m = x[: (x.size // 64) * 64]
    xc, xg = _f32(m).reshape(64, -1).transpose(0, 1), _f32(m, "opencl").reshape(64, -1).transpose(0, 1)
    row = g[:64]
    got = _bits(tgrad.ops.apply(name, xg, _f32(row, "opencl")))
    assert np.array_equal(got, _bits(tgrad.ops.apply(name, xc, _f32(row)))), name


def train_float32(device: str) -> list[np.ndarray]:
    """Three AdamW steps of a float32 parameter under a loss through every op the device renders
    in binary64 (their derivatives: g y, g / x, g cos x, -g sin x and the derivative ops)."""
    rng = np.random.default_rng(11)
    w = tgrad.Tensor.from_numpy(rng.standard_normal(40).astype(np.float32), dtype=tgrad.float32,
                                device=device).requires_grad_()
    opt = tgrad.optim.AdamW([w], lr=1e-2, weight_decay=0.01)
    for _ in range(3):
        pos = (w * w + 0.5).sqrt()
        terms = [w.exp(), pos.log(), pos.log1p(), w.sin(), w.cos(), w.tanh(), w.sigmoid(),
                 tgrad.ops.apply("silu", w), tgrad.ops.apply("gelu", w), tgrad.ops.apply("gelu_tanh", w),
                 tgrad.ops.apply("rsqrt", pos), w ** 3]
        loss = terms[0]
        for t in terms[1:]:
            loss = loss + t
        opt.zero_grad()
        (loss * loss).mean().backward()
        opt.step()
    return [np.ascontiguousarray(w.numpy()).view(np.uint32)] + [
        np.ascontiguousarray(v.numpy()).view(np.uint32) for s in opt.state.values()
        for _, v in sorted(s.items()) if isinstance(v, tgrad.Tensor)]


def test_pocl_trains_a_float32_parameter_through_every_op_with_the_cpu_bytes(opencl_device: str) -> None:
    cpu, dev = train_float32("cpu"), train_float32("opencl")
    assert len(cpu) == len(dev) >= 3
    for a, b in zip(cpu, dev):
        assert np.array_equal(a, b)


def exponents(n: int, seed: int) -> np.ndarray:
    """pow's b as float32 bits: small integers (even and odd, negative too), halves, drawn values of
    several scales, one in sixteen any pattern."""
    rng = np.random.default_rng(seed)
    kinds = [rng.integers(-6, 9, n).astype(np.float32), rng.integers(-8, 9, n).astype(np.float32) / 2,
             (rng.standard_normal(n) * 3).astype(np.float32), (rng.standard_normal(n) * 40).astype(np.float32)]
    b = np.choose(rng.integers(0, 4, n), kinds).astype(np.float32).view(np.uint32)
    wild = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    return np.where(rng.random(n) < 1 / 16, wild, b).astype(np.uint32)


def bases(n: int, seed: int) -> np.ndarray:
    """pow's a as float32 bits: values of every scale and sign, exact powers of two, one in sixteen
    any pattern."""
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(n) * np.exp2(rng.integers(-8, 8, n))).astype(np.float32)
    a[::7] = np.exp2(rng.integers(-5, 6, a[::7].size)).astype(np.float32) * rng.choice([-1, 1], a[::7].size)
    wild = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    return np.where(rng.random(n) < 1 / 16, wild, a.view(np.uint32)).astype(np.uint32)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pocl_pow_gives_the_cpu_bytes_and_runs_as_its_own_kernel(dtype: str, opencl_device: str) -> None:
    """pow in binary64 with a bound in both dtypes (bf16 operands: their float32 bits' top halves);
    fused after a product and before an add on the CPU, a kernel of its own on the device."""
    dt = getattr(tgrad, dtype)
    a, b = bases(6000, 1), exponents(6000, 2)
    if dt is tgrad.bfloat16:  # bf16 values: the float32 patterns truncated (NaN payloads kept NaN)
        a, b = a & np.uint32(0xFFFF0000), b & np.uint32(0xFFFF0000)
    mk = lambda bits, dev: tgrad.Tensor.from_numpy(bits.view(np.float32), dtype=dt, device=dev)
    view = np.uint16 if dt is tgrad.bfloat16 else np.uint32
    before = device_host("pow", dt is tgrad.bfloat16)
    want, got = tgrad.ops.apply("pow", mk(a, "cpu"), mk(b, "cpu")), tgrad.ops.apply("pow", mk(a, "opencl"), mk(b, "opencl"))
    w, g = np.ascontiguousarray(want.numpy()).view(view), np.ascontiguousarray(got.numpy()).view(view)
    assert np.array_equal(w, g), f"{np.count_nonzero(w != g)} differ"
    assert device_host("pow", dt is tgrad.bfloat16) > before  # the NaNs, infinities, zeros and midpoints went to the host
    xc, xg = mk(a, "cpu").reshape(60, 100), mk(a, "opencl").reshape(60, 100)
    yc, yg = mk(b[:100], "cpu"), mk(b[:100], "opencl")
    chain = lambda x, y: tgrad.ops.apply("pow", (x * 0.5).transpose(0, 1), y.reshape(100, 1)) + 1.0
    out = chain(xg, yg)
    assert len(out.explain(json=True)["steps"]) == 3  # the product, pow alone, the add
    if dt is tgrad.bfloat16:  # (float32 ops are never fused)
        assert "runs as its own kernel" in out.explain()
    assert np.array_equal(np.ascontiguousarray(out.numpy()).view(view), np.ascontiguousarray(chain(xc, yc).numpy()).view(view))


def test_pocl_leaves_subnormal_inputs_to_the_host(opencl_device: str) -> None:
    """A subnormal input is undecided in every op (the device may flush it): the host recomputes
    exactly those elements, and the result is the CPU's."""
    x = np.array([0x3F800000, 0x00000001, 0x807FFFFF, 0x40000000, 0x00400000, 0xC0000000], np.uint32)
    for name in ("exp", "tanh", "silu"):
        before = device_host(name)
        got = _bits(tgrad.ops.apply(name, _f32(x, "opencl")))
        assert device_host(name) - before == 3, name
        assert np.array_equal(got, _bits(tgrad.ops.apply(name, _f32(x)))), name


def test_every_elementwise_op_is_made_in_float32_on_a_device_with_the_cpu_bytes(opencl_device: str) -> None:
    """No op of the registry is refused in float32 on a GPU device any more (integers or binary64)."""
    rng = np.random.default_rng(4)
    a = (rng.standard_normal(257) * 3).astype(np.float32)
    b = (rng.standard_normal(257) * 2).astype(np.float32)
    for name, info in tgrad.ops.REGISTRY.items():
        args = [a, b][: info.arity]
        want = tgrad.ops.apply(name, *[tgrad.Tensor.from_numpy(v, dtype=tgrad.float32) for v in args])
        got = tgrad.ops.apply(name, *[tgrad.Tensor.from_numpy(v, dtype=tgrad.float32, device="opencl") for v in args])
        assert got.device == "opencl", name
        assert np.array_equal(_bits(got), _bits(want)), name


@pytest.mark.parametrize("lang", ["msl", "opencl", "cuda"])
def test_transcendental_kernels_render_with_flags_in_every_language(lang: str) -> None:
    x = _f32(np.arange(6, dtype=np.float32).view(np.uint32))
    for name in OPS:
        k = R.render_tensor(tgrad.ops.apply(name, x[::-1]), None, lang)
        assert f"tg_tf_{name}(v)" in k.source and "f[i] = undecided;" in k.source, name
        assert k.buffer_names[-1] == "f" and k.buffer_elements[-1] == 6, name
    for name in GRADS:
        k = R.render_tensor(tgrad.ops.apply(name, x[::-1], x), None, lang)
        assert f"tg_tf_{name}(v, e0[" in k.source and k.buffer_names[-1] == "f", name
    k = R.render_tensor(tgrad.ops.apply("pow", x[::-1], x), None, lang)
    assert "tg_tf_pow(v, e0[" in k.source and k.buffer_names[-1] == "f"
    xb = tgrad.Tensor.from_numpy(np.arange(6, dtype=np.float32))
    k = R.render_tensor(tgrad.ops.apply("pow", xb[::-1], xb), None, lang)
    assert "tg_tf_pow_bf16(v, e0[" in k.source and "v = (ushort)r;" in k.source and k.buffer_names[-1] == "f"


# ---- the emulators -----------------------------------------------------------------------------------
def _emulated(emu: Any, lang: str, y: tgrad.Tensor, x: np.ndarray, mutate: Any = None,
              ftz: bool = False, g: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The kernel of y = op(x) (or op(x, g)) on the emulator: (c, f), the values and the flags."""
    kern = R.render_tensor(y, None, lang)
    outs = {kern.buffer_names.index("c"), kern.buffer_names.index("f")}
    inputs_by_name = {"x": x, "e0": g}
    bufs = [np.full(cnt, 0xFFFFFFFF, np.uint32) if i in outs else inputs_by_name[kern.buffer_names[i]][:cnt]
            for i, cnt in enumerate(kern.buffer_elements)]
    source = mutate(kern.source) if mutate else kern.source
    res = emu.run(emu.compile(source), kern.grid, kern.threadgroup, bufs, [i not in outs for i in range(len(bufs))],
                  order="shuffle", seed=1, ftz=ftz)
    return np.asarray(res[kern.buffer_names.index("c")]), np.asarray(res[kern.buffer_names.index("f")])


def _wrong_decisions(emu: Any, lang: str, name: str, x: np.ndarray, mutate: Any = None,
                     ftz: bool = False, g: np.ndarray | None = None) -> tuple[int, int]:
    """(decided elements that differ from the CPU, undecided ordinary ones) of op `name` over x.
    Ordinary: a normal x of magnitude at most 2^20 (MSL's sin and cos leave |x| > 2^32 to the host)
    whose result is above float32's subnormals (a result at 2^-126 or below may be left to the host)."""
    y = tgrad.ops.apply(name, _f32(x)) if g is None else tgrad.ops.apply(name, _f32(x), _f32(g))
    c, f = _emulated(emu, lang, y, x, mutate, ftz, g)
    want = _bits(y)
    decided = f[: x.size] == 0
    e, w = (x >> np.uint32(23)) & np.uint32(0xFF), want & np.uint32(0x7FFFFFFF)
    ordinary = (e >= 1) & (e <= 127 + 20) & (w > 0x00800000)
    return int(np.count_nonzero(c[: x.size][decided] != want[decided])), int(np.count_nonzero(~decided & ordinary))


@pytest.mark.parametrize("lang", [pytest.param("msl", marks=pytest.mark.slow),  # the MSL emulator: slow tier
                                  pytest.param("cuda", marks=pytest.mark.cuda)])  # the CUDA emulator: cuda tier
def test_the_generated_transcendental_kernels_decide_only_the_cpu_bytes(lang: str) -> None:
    emu = emulator(lang)
    for name in OPS:
        x = np.unique(inputs(name, 3))[::3].copy()  # each input once
        for ftz in (False, True):  # the device's float32 subnormals cannot matter
            wrong, undecided = _wrong_decisions(emu, lang, name, x, ftz=ftz)
            assert wrong == 0, (name, ftz)
            assert undecided < 8, (name, undecided)  # the bound decides almost every ordinary element
    for name in GRADS:
        x = np.unique(inputs("tanh", 4))[::3].copy()
        g = cotangents(x.size, 4)
        for ftz in (False, True):
            wrong, _ = _wrong_decisions(emu, lang, name, x, ftz=ftz, g=g)
            assert wrong == 0, (name, ftz)
    a, b = bases(3000, 5), exponents(3000, 6)
    for ftz in (False, True):
        wrong, undecided = _wrong_decisions(emu, lang, "pow", a, ftz=ftz, g=b)
        assert wrong == 0, ("pow", ftz)


def near_midpoints() -> np.ndarray:
    """float32 x in [1, 2) whose e^x lies just past a float32 rounding midpoint (by 2^-47 to 2^-41
    of it, above): float64's exp (within 2^-52) tells the side."""
    x = (np.arange(1 << 23, dtype=np.uint32) + np.uint32(0x3F800000)).view(np.float32)
    y = np.exp(x.astype(np.float64))
    ulp = np.spacing(y.astype(np.float32)).astype(np.float64)
    k = y / ulp
    dist = (k - np.floor(k) - 0.5) * ulp / y  # relative distance above the midpoint below y
    pick = (dist > 2.0 ** -47) & (dist < 2.0 ** -41)
    return x[pick].view(np.uint32).copy()


@pytest.mark.parametrize("lang", [pytest.param("msl", marks=pytest.mark.slow),
                                  pytest.param("cuda", marks=pytest.mark.cuda)])
def test_the_emulator_catches_a_fallback_never_taken(lang: str) -> None:
    emu = emulator(lang)
    x = near_midpoints()
    assert x.size >= 16
    wrong, undecided = _wrong_decisions(emu, lang, "exp", x)
    assert wrong == 0 and undecided == x.size  # each of them left to the host
    never = lambda src: src.replace("return lo == hi ? (tg_u64)lo : tg_tf_undecided();", "return (tg_u64)(lo + 0u * hi);")
    wrong, undecided = _wrong_decisions(emu, lang, "exp", x, never)
    assert undecided == 0 and wrong == x.size
