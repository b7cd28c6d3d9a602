"""The counter-based generator on the GPU routes (docs/random.md, "On GPU devices"): route random
renders uniform and randint draws in MSL, OpenCL C and CUDA, Philox-4x32-10 in integer arithmetic
(kernels/gpu/philox.h pasted as it is), with the CPU's bytes for the same (seed, offset).

- PoCL (device="opencl"): a roster of draws (rand in bf16 and float32, bf16 uniform(low, high)
  with values on and near rounding midpoints, randint over small and full int32 ranges) at offsets
  that start mid-call, cross 2^32 calls and end at the counter space's end, seeds with both key
  words, bit for bit against the CPU.
- The emulators (MSL: slow tier; CUDA: cuda tier): the same roster's kernels under every fiber order.
- A kernel drawing the wrong word or with the wrong counter is caught.
- normal: Box-Muller in double, one thread per Philox call, each value decided within the CPU's
  window or its call flagged and drawn again on the host: rendered in every language (in MSL, which
  has no double, kernels/gpu/softdouble.h's binary64 in integers and softmath.h's log, sin and cos,
  no floating-point type named); the CPU's bytes on PoCL (an undecided call included), on the CUDA
  emulator, and on the MSL emulator (slow tier) with, on this roster, exactly the CUDA emulator's
  flags.
- A normal kernel drawing wrongly is caught: the pair's values swapped, a fallback never taken
  (CUDA and MSL), a software double converting negative integers wrongly (MSL).
- float32 uniform(low, high) off [0, 1): the same kernel of calls as normal's, each value
  low + (high - low) k 2^-24 in binary64 decided within the CPU's window or its call flagged and
  drawn again on the host (kernels/gpu/uniform.h): the CPU's bytes on PoCL (ties included, where
  the host takes the CPU's exact path), on the CUDA emulator and on the MSL emulator.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad import render as R

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emulators import emulator  # noqa: E402


@dataclass(frozen=True)
class Draw:
    name: str
    dist: str  # rand, uniform, randint
    dtype: Any
    params: tuple[float, ...]
    n: int
    seed: int
    offset: int

    def make(self, device: str) -> tgrad.Tensor:
        g = tgrad.random.Generator(self.seed)
        g.set_state((self.seed, self.offset))
        if self.dist == "normal":
            return g.normal(*self.params, self.n, dtype=self.dtype, device=device)
        if self.dist == "rand":
            return g.rand(self.n, dtype=self.dtype, device=device)
        if self.dist == "uniform":
            return g.uniform(*self.params, self.n, dtype=self.dtype, device=device)
        return g.randint(int(self.params[0]), int(self.params[1]), self.n, device=device)


BF16, F32 = tgrad.bfloat16, tgrad.float32
DRAWS = [
    Draw("rand_bf16", "rand", BF16, (), 1000, 0, 0),
    Draw("rand_f32_mid_call", "rand", F32, (), 777, 1234, 3),
    Draw("rand_bf16_high_seed", "rand", BF16, (), 300, (1 << 63) + 987654321, 10**6 + 1),
    Draw("rand_f32_across_2p32_calls", "rand", F32, (), 64, 7, 4 * (1 << 32) - 30),
    Draw("rand_bf16_end_of_counters", "rand", BF16, (), 9, 5, (1 << 64) - 10),
    Draw("uniform_bf16_symmetric", "uniform", BF16, (-0.1, 0.1), 2000, 1, 5),
    Draw("uniform_bf16_midpoints", "uniform", BF16, (0.0, 3.0), 1500, 2, 0),
    Draw("uniform_bf16_wide", "uniform", BF16, (-1e30, 3e35), 500, 3, 2),
    Draw("uniform_bf16_narrow", "uniform", BF16, (1.0, 1.0078125), 500, 4, 1),
    Draw("randint_small", "randint", None, (0, 10), 1001, 9, 1),
    Draw("randint_negative", "randint", None, (-7, 3), 400, 10, 0),
    Draw("randint_full", "randint", None, (-(1 << 31), (1 << 31) - 1), 333, 11, 7),
    Draw("randint_across_2p32_calls", "randint", None, (-5, 1 << 30), 40, 12, 2 * (1 << 32) - 11),
]
# normal: Box-Muller in double (native in OpenCL C and CUDA, softdouble.h's in MSL), one thread per
# Philox call
NORMALS = [
    Draw("normal_bf16", "normal", BF16, (0.0, 1.0), 1000, 0, 0),
    Draw("normal_f32_mid_call", "normal", F32, (2.5, 0.3), 777, 1234, 3),
    Draw("normal_f32_tiny_sd_across_2p32_calls", "normal", F32, (-1.0, 1e-3), 64, 7, 4 * (1 << 32) - 30),
    Draw("normal_bf16_sd_0", "normal", BF16, (3.0, 0.0), 9, 5, 6),
    Draw("normal_f32_end_of_counters", "normal", F32, (0.0, 1.0), 50, 9, (1 << 64) - 51),
    Draw("normal_bf16_huge_mean", "normal", BF16, (1e30, 1e29), 300, 3, 2),
    # element 168002 is undecided in double (the CPU takes its slow path there too): its call is
    # flagged and drawn again on the host
    Draw("normal_f32_undecided_call", "normal", F32, (1.0, 1.0), 7, 11, 167999),
]

# float32 uniform(low, high): low + (high - low) k 2^-24 in binary64, the same kernel of calls and
# flags as normal's (kernels/gpu/uniform.h). On (1, 1.25) an eighth of the values are float32 ties
# (1 + k 2^-26 with k = 4 mod 8): the window holds the midpoint, so many calls are flagged and drawn
# again on the host, through the CPU's exact path.
RANGED = [
    Draw("uniform_f32_ties", "uniform", F32, (1.0, 1.25), 1000, 0, 0),
    Draw("uniform_f32_mid_call", "uniform", F32, (-3.0, 7.5), 777, 1234, 3),
    Draw("uniform_f32_huge_across_2p32_calls", "uniform", F32, (-1e30, 3e30), 64, 7, 4 * (1 << 32) - 30),
    Draw("uniform_f32_end_of_counters", "uniform", F32, (0.5, 0.75), 50, 9, (1 << 64) - 51),
]
# the draws whose kernels leave some value undecided (their calls flagged)
FLAGGED = {"normal_f32_undecided_call", "uniform_f32_ties", "uniform_f32_mid_call", "uniform_f32_end_of_counters"}


def _bytes(t: tgrad.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8).copy()


def cpu_bytes(d: Draw) -> np.ndarray:
    with d.make("cpu") as t:
        return _bytes(t)


def _first_difference(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"{got.size} bytes, want {want.size}"
    i = int(np.argmax(got != want))
    return f"{np.count_nonzero(got != want)} bytes differ; first {i}: got {got[i]:#04x}, want {want[i]:#04x}"


# ---- PoCL ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("draw", DRAWS, ids=lambda d: d.name)
def test_pocl_draws_the_cpu_bytes(draw: Draw, opencl_device: str) -> None:
    want = cpu_bytes(draw)
    with draw.make("opencl") as t:
        assert t.device == "opencl" and "opencl.random" in t.explain()
        got = _bytes(t)
    assert np.array_equal(got, want), f"{draw.name}: " + _first_difference(got, want)


def test_pocl_draws_continue_each_other(opencl_device: str) -> None:
    g = tgrad.random.Generator(42)
    with g.rand(1000, device="opencl") as whole:
        want = _bytes(whole)
    g.set_state((42, 0))
    with g.rand(333, device="opencl") as a, g.rand(667, device="opencl") as b:
        assert np.array_equal(np.concatenate([_bytes(a), _bytes(b)]), want)


@pytest.mark.parametrize("draw", NORMALS, ids=lambda d: d.name)
def test_pocl_draws_normal_values_with_the_cpu_bytes(draw: Draw, opencl_device: str) -> None:
    want = cpu_bytes(draw)
    slow = _normal_slow_paths()
    with draw.make("opencl") as t:
        got = _bytes(t)
    assert np.array_equal(got, want), f"{draw.name}: " + _first_difference(got, want)
    if draw.name == "normal_f32_undecided_call":  # the flagged call was drawn again by the CPU's code
        assert _normal_slow_paths() > slow


def test_pocl_randn_is_the_cpu_draw(opencl_device: str) -> None:
    tgrad.random.manual_seed(3)
    state = tgrad.random.get_rng_state()
    with tgrad.randn(5, 7, device="opencl") as got:
        tgrad.random.set_rng_state(state)
        with tgrad.randn(5, 7) as want:
            assert got.device == "opencl" and np.array_equal(_bytes(got), _bytes(want))


def _normal_slow_paths() -> int:
    from tgrad._ffi import ffi, lib

    counts = ffi.new("int64_t[1]")
    assert lib.tgrad_debug_random_slow_path(lib.TGRAD_RANDOM_NORMAL, counts, 1) == 0
    return int(counts[0])


def _uniform_slow_paths() -> int:
    from tgrad._ffi import ffi, lib

    counts = ffi.new("int64_t[1]")
    assert lib.tgrad_debug_random_slow_path(lib.TGRAD_RANDOM_UNIFORM, counts, 1) == 0
    return int(counts[0])


@pytest.mark.parametrize("draw", RANGED, ids=lambda d: d.name)
def test_pocl_draws_float32_uniform_ranges_with_the_cpu_bytes(draw: Draw, opencl_device: str) -> None:
    slow = _uniform_slow_paths()
    want = cpu_bytes(draw)
    cpu_slow = _uniform_slow_paths() - slow
    with draw.make("opencl") as t:
        assert "opencl.random" in t.explain()
        got = _bytes(t)
    assert np.array_equal(got, want), f"{draw.name}: " + _first_difference(got, want)
    # the flagged calls drawn again by the CPU's code, through its exact path where the CPU's draw takes it
    device_slow = _uniform_slow_paths() - slow - cpu_slow
    assert (cpu_slow > 0) == (device_slow > 0) == (draw.name in FLAGGED), (cpu_slow, device_slow)


# ---- rendering ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("lang", ["msl", "opencl", "cuda"])
def test_every_draw_renders_one_random_kernel(lang: str) -> None:
    names = set()
    for d in DRAWS:
        with d.make("cpu") as t:
            k = R.render_tensor(t, None, lang) if not t.is_realized else None
        assert k is not None and k.route == "random" and k.buffer_names == ("c", "q")
        assert k.name.startswith(f"tgrad_random_{'randint' if d.dist == 'randint' else 'uniform'}_")
        assert ("tg_uniform_table" in k.source) == (d.dist == "uniform")
        names.add(k.name)
    assert len(names) == len(DRAWS)


def _floating_words(source: str) -> list[str]:
    """The lines of source that name double or float outside a // comment."""
    return [line for line in source.splitlines() if re.search(r"\b(double|float)\b", line.split("//")[0])]


@pytest.mark.parametrize("lang", ["msl", "opencl", "cuda"])
def test_normal_draws_render_in_every_language_a_kernel_a_call_with_a_flag_each(lang: str) -> None:
    names = set()
    for d in NORMALS + RANGED:
        with d.make("cpu") as t:
            k = R.render_tensor(t, None, lang)
        value = "tg_normal_value(" if d.dist == "normal" else "tg_uniform_value("
        assert k.route == "random" and k.buffer_names == ("c", "q", "f") and k.name.startswith(f"tgrad_random_{d.dist}_")
        assert k.buffer_elements[2] == (d.n + 6) // 4 and value in k.source
        if lang == "msl":  # no double in Metal: the software double's, in integers
            assert "typedef struct tg_f64" in k.source and _floating_words(k.source) == []
        names.add(k.name)
    assert len(names) == len(NORMALS) + len(RANGED)


def test_draws_of_one_shape_share_their_kernel_text() -> None:
    """The seed and the offset are the launch's (buffer q), not the text's: a device compiles a
    shape's kernel once, not once per draw."""
    base = DRAWS[0]
    texts = set()
    for seed, offset in ((0, 0), (5, 12345), ((1 << 64) - 1, 3 << 40)):
        with Draw(base.name, base.dist, base.dtype, base.params, base.n, seed, offset).make("cpu") as t:
            texts.add(R.render_tensor(t, None, "opencl").source)
    assert len(texts) == 1


# ---- the emulators -----------------------------------------------------------------------------------
def _kernel(d: Draw, lang: str) -> R.Kernel:
    with d.make("cpu") as t:
        return R.render_tensor(t, None, lang)


def words(d: Draw) -> np.ndarray:
    """The launch's buffer q: the offset's and the seed's low and high words."""
    return np.array([d.offset & 0xFFFFFFFF, d.offset >> 32, d.seed & 0xFFFFFFFF, d.seed >> 32], np.uint32)


def _run(emu: Any, k: R.Kernel, d: Draw, source: str | None = None, **options: Any) -> np.ndarray:
    wide = "uint *c" in k.source
    out = np.full(k.buffer_elements[0], 0xFFFFFFFF if wide else 0xFFFF, np.uint32 if wide else np.uint16)
    assert k.buffer_names == ("c", "q")
    return emu.run(emu.compile(source or k.source), k.grid, k.threadgroup, [out, words(d)], [False, True],
                   **options)[0].view(np.uint8)


def _emulated(lang: str, d: Draw) -> None:
    emu = emulator(lang)
    k, want = _kernel(d, lang), cpu_bytes(d)
    for i, fibers in enumerate(("forward", "reverse", "shuffle")):
        got = _run(emu, k, d, order=fibers, seed=i)
        assert np.array_equal(got, want), f"[{lang} {d.name} {fibers}] " + _first_difference(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("draw", DRAWS, ids=lambda d: d.name)
def test_generated_msl_draws_the_cpu_bytes(draw: Draw) -> None:
    _emulated("msl", draw)


@pytest.mark.cuda
@pytest.mark.parametrize("draw", DRAWS, ids=lambda d: d.name)
def test_generated_cuda_draws_the_cpu_bytes(draw: Draw) -> None:
    _emulated("cuda", draw)


def _run_normal(emu: Any, k: R.Kernel, d: Draw, source: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A normal kernel's values and its flags (one per Philox call) under the emulator."""
    wide = d.dtype is F32
    out = np.full(d.n, 0xFFFFFFFF if wide else 0xFFFF, np.uint32 if wide else np.uint16)
    flags = np.full(k.buffer_elements[2], 7, np.uint32)  # every flag is written
    got = emu.run(emu.compile(source or k.source), k.grid, k.threadgroup, [out, words(d), flags],
                  [False, True, False])
    return got[0].view(np.uint8), got[2]


def _calls_of(d: Draw, flags: np.ndarray) -> set[int]:
    """The elements of the draw whose call the flags name (as the host reruns them)."""
    first = d.offset // 4
    return {i for t in np.flatnonzero(flags) for j in range(4)
            if 0 <= (i := (((first + int(t)) % (1 << 62)) * 4 + j - d.offset) % (1 << 64)) < d.n}


def _check_normal(emu: Any, k: R.Kernel, draw: Draw, source: str | None = None) -> np.ndarray:
    """Every value the kernel decided is the CPU's; only the undecided draw's call is flagged (the
    host redraws it); every flag is written (0 or 1). Returns the flags."""
    want = cpu_bytes(draw)
    got, flags = _run_normal(emu, k, draw, source)
    assert set(np.unique(flags)) <= {0, 1}
    flagged = _calls_of(draw, flags)
    assert bool(flagged) == (draw.name in FLAGGED), flagged
    size = 4 if draw.dtype is F32 else 2
    keep = np.ones(draw.n, bool)
    keep[list(flagged)] = False
    assert np.array_equal(got.reshape(draw.n, size)[keep], want.reshape(draw.n, size)[keep]), draw.name
    return flags


@pytest.mark.cuda
@pytest.mark.parametrize("draw", NORMALS + RANGED, ids=lambda d: d.name)
def test_generated_cuda_draws_normal_values_with_the_cpu_bytes(draw: Draw) -> None:
    _check_normal(emulator("cuda"), _kernel(draw, "cuda"), draw)


# (draw, old text, new text): each defect caught on both emulators
CALL_DEFECTS = [
    (NORMALS[-1], "r, jj == 0u ? cz : sz)", "r, jj == 0u ? sz : cz)"),  # the pair's values swapped
    (NORMALS[-1], "flag |= (uint)(v >> 32);", ""),                       # a fallback never taken
    (RANGED[0], "flag |= (uint)(v >> 32);", ""),  # the same on the ties: the window's lower ends kept
]
CALL_DEFECT_IDS = ["swapped", "never_flagged", "uniform_never_flagged"]


def _defect_caught(lang: str, draw: Draw, old: str, new: str) -> None:
    k = _kernel(draw, lang)
    assert old in k.source
    with pytest.raises(AssertionError):
        _check_normal(emulator(lang), k, draw, k.source.replace(old, new))


@pytest.mark.cuda
@pytest.mark.parametrize(("draw", "old", "new"), CALL_DEFECTS, ids=CALL_DEFECT_IDS)
def test_a_kernel_of_calls_drawing_wrongly_is_caught(draw: Draw, old: str, new: str) -> None:
    _defect_caught("cuda", draw, old, new)


@pytest.mark.slow
@pytest.mark.parametrize("draw", NORMALS + RANGED, ids=lambda d: d.name)
def test_generated_msl_draws_normal_values_with_the_cpu_bytes_and_the_cuda_flags(draw: Draw) -> None:
    """The software double's Box-Muller: the CPU's bytes where decided, and the calls the CUDA
    emulator flags (the undecided draw's) flagged, no other: the same doubles but for log, sin and
    cos (softmath.h's, within 2 ulps as libm's are within 1), which leave these decisions alone."""
    flags = _check_normal(emulator("msl"), _kernel(draw, "msl"), draw)
    assert np.array_equal(flags, _run_normal(emulator("cuda"), _kernel(draw, "cuda"), draw)[1]), draw.name


@pytest.mark.slow
@pytest.mark.parametrize(("draw", "old", "new"), CALL_DEFECTS, ids=CALL_DEFECT_IDS)
def test_an_msl_kernel_of_calls_drawing_wrongly_is_caught(draw: Draw, old: str, new: str) -> None:
    _defect_caught("msl", draw, old, new)


@pytest.mark.slow
def test_a_software_double_converting_negative_integers_wrongly_is_caught() -> None:
    """softdouble.h's tg_d_i64 taking a negative integer's two's complement bits for its
    magnitude: the angle's reduced turn m, negative for about half the values, far off, and those
    values decided wrong. (A tie or a sticky bit lost moves a double by an ulp the window absorbs:
    tests/c/test_gpu_softdouble.c catches those bit for bit.)"""
    draw, emu = NORMALS[1], emulator("msl")
    old, new = "tg_u64 mag = s != 0u ? (tg_u64)0u - (tg_u64)v : (tg_u64)v;", "tg_u64 mag = (tg_u64)v;"
    k, want = _kernel(draw, "msl"), cpu_bytes(draw)
    assert old in k.source
    got, flags = _run_normal(emu, k, draw)
    assert not flags.any() and np.array_equal(got, want)
    got, flags = _run_normal(emu, k, draw, k.source.replace(old, new))
    assert not flags.any() and not np.array_equal(got, want)  # decided, and wrong


@pytest.mark.slow
@pytest.mark.parametrize(("draw", "old", "new"), [
    (DRAWS[1], "j == 1u ? w.w[1]", "j == 1u ? w.w[2]"),        # the wrong word
    (DRAWS[9], "(uint)(call >> 32), 3u,", "(uint)(call >> 32), 1u,"),  # another distribution's counters
    (DRAWS[5], "tg_uniform_table[word >> 24]", "tg_uniform_table[(word >> 24) ^ 1u]"),  # the wrong value
], ids=["word", "counter", "table"])
def test_a_kernel_drawing_wrongly_is_caught(draw: Draw, old: str, new: str) -> None:
    emu = emulator("msl")
    k, want = _kernel(draw, "msl"), cpu_bytes(draw)
    assert old in k.source
    assert np.array_equal(_run(emu, k, draw), want)
    assert not np.array_equal(_run(emu, k, draw, k.source.replace(old, new)), want)
