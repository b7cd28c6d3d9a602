"""The gradient's kinds on the GPU routes (docs/kernels.md, "The gradient's routes"): place (a view's
transpose), scatter_add (take's transpose) and optim_step (SGD and AdamW), rendered in MSL, OpenCL C
and CUDA (gen/render_scatter.c, gen/render_optim.c), run on PoCL (device="opencl", core tier) and
on both emulators (MSL: slow tier; CUDA: cuda tier) with the CPU's bytes:

- place through sliced, stepped, reversed, transposed and permuted views, a row of an extent-1
  axis, an empty view;
- scatter_add along the first, a middle and the last axis, negative and repeated indices, index
  tensors of two dimensions, no index at all, gradients holding NaN payloads, infinities, signed
  zeros and subnormals (the exact sum rounded once: kernels/gpu/reduce.h);
- optim_step's every output for SGD (decay, momentum, nesterov, maximize) and AdamW (decay,
  amsgrad, maximize, beta1 = 0), inputs with special values, through views;
- a two-layer MLP trained for three AdamW steps, a gated silu MLP (Llama's, after gelu and tanh-gelu
  layers) for three, an embedding classifier under cross-entropy for two, and layers with rms_norm
  and layer_norm (weights and bias) for two SGD steps, on PoCL give the CPU's bytes (parameters
  and state), their backward graphs all on the device;
- planted defects (a scatter_add that drops the last position of each index, a wrong landing stride, a fused step rounded
  twice) are caught by the emulators.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from test_gpu_reduce import _cxx, _opencl_ready
from test_gpu_select import _bits, cuda, msl  # noqa: F401 (cuda, msl: the emulator fixtures)

import tgrad
from tgrad import autograd, errors
from tgrad import render as R
from tgrad.optim import _kernel

needs_opencl = pytest.mark.skipif(not _opencl_ready(), reason="no usable OpenCL device")
needs_cxx = pytest.mark.skipif(not _cxx(), reason="no C++ compiler for the emulators")
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}
DTYPES = ("bfloat16", "float32")

# place: (the leaf's shape, the view whose transpose the gradient runs)
PLACE: dict[str, tuple[tuple[int, ...], Callable[[Any], Any]]] = {
    "slice_step": ((6, 5), lambda x: x[::2, 1:5:2]),
    "transpose_reversed": ((6, 5), lambda x: x.T[::-1]),
    "three_axes_reversed": ((4, 7, 3), lambda x: x[::-1, 2:, ::-2]),
    "permute": ((2, 3, 4), lambda x: x.permute(2, 0, 1)),
    "column": ((5, 5), lambda x: x[1:4, 2]),
    "extent_one_row": ((3, 1, 4), lambda x: x[1]),
    "empty": ((4, 3), lambda x: x[2:2]),
    "long": ((3, 700), lambda x: x[:, 3:-5:3]),
}
# scatter_add: (the leaf's shape, the axis, the indices)
SCATTER: dict[str, tuple[tuple[int, ...], int, np.ndarray]] = {
    "axis0_repeats": ((6, 3), 0, np.array([[4, 0], [4, -1], [2, 4]], np.int32)),
    "middle_axis": ((2, 5, 3), 1, np.array([3, 3, -2, 0, 1, 3], np.int32)),
    "last_axis": ((3, 4), -1, np.array([1, -3, 1, 1, 0], np.int32)),
    "one_row_many_times": ((4,), 0, np.array([1] * 9, np.int32)),
    "no_index": ((3, 2), 0, np.zeros((0,), np.int32)),
    "embedding": ((10, 8), 0, np.array([[1, 7, 7, 0], [9, 1, 2, -1]], np.int32)),
}
# optim_step: (algorithm, flags, input count, scalars) -- every output of each
SGD, ADAMW = _kernel.SGD, _kernel.ADAMW
F = {"max": _kernel.MAXIMIZE, "decay": _kernel.DECAY, "mom": _kernel.MOMENTUM, "nest": _kernel.NESTEROV,
     "ams": _kernel.AMSGRAD}
OPTIM: dict[str, tuple[int, int, int, list[float]]] = {
    "sgd_plain": (SGD, 0, 2, [0.0, 0.0, 1.0, -0.1]),
    "sgd_decay_momentum_first": (SGD, F["decay"] | F["mom"], 2, [0.01, 0.9, 1.0, -0.1]),
    "sgd_momentum_dampening": (SGD, F["mom"], 3, [0.0, 0.9, 0.75, -0.05]),
    "sgd_nesterov_maximize": (SGD, F["mom"] | F["nest"] | F["max"] | F["decay"], 3, [1e-3, 0.8, 1.0, -0.2]),
    "adamw": (ADAMW, F["decay"], 4, [1 - 1e-5, 0.1, -0.9, 0.999, 1e-3, 0.0447, 1e-8, -0.0526]),
    "adamw_amsgrad_first": (ADAMW, F["ams"], 4, [1.0, 0.1, -0.9, 0.99, 0.01, 0.1, 1e-6, -1e-2]),
    "adamw_amsgrad_maximize": (ADAMW, F["ams"] | F["max"] | F["decay"], 5, [0.999, 0.1, -0.9, 0.9, 0.1, 0.3, 1e-3, -0.5]),
    "adamw_beta1_zero": (ADAMW, 0, 4, [1.0, 1.0, 0.0, 0.999, 1e-3, 0.03, 1e-8, -1e-3]),
}


def _nstate(algo: int, flags: int) -> int:
    return (1 if flags & _kernel.MOMENTUM else 0) if algo == SGD else (3 if flags & _kernel.AMSGRAD else 2)


OPTIM_CASES = [(name, which) for name, (algo, flags, _, _) in OPTIM.items() for which in range(1 + _nstate(algo, flags))]


def _tensor(arr: np.ndarray, dtype: str, device: str) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(arr, dtype=getattr(tgrad, dtype), device=device)


def _optim_inputs(name: str, n: int) -> list[np.ndarray]:
    """Float32 inputs with specials planted (NaN payloads, infinities, signed zeros, subnormals),
    the states non-negative where AdamW's square root reads them."""
    rng = np.random.default_rng(len(name))
    out = []
    for k in range(n):
        a = (rng.standard_normal((5, 7)) * np.exp2(rng.integers(-30, 10, (5, 7)))).astype(np.float32)
        a.reshape(-1)[k: k + 4] = [0.0, -0.0, np.float32(1e-40), [np.inf, np.nan, -np.inf, 3.0][k % 4]]
        if OPTIM[name][0] == ADAMW and k >= 3:
            a = np.abs(a)
        out.append(a)
    return out


# ---- the cases as (result tensor, the leaf tensors the kernels read) ------------------------------
def place_case(name: str, dtype: str, device: str) -> tuple[tgrad.Tensor, list[tgrad.Tensor]]:
    shape, view = PLACE[name]
    x = _tensor(np.zeros(shape, np.float32), dtype, device).requires_grad_()
    y = view(x)
    seed = _tensor(_bits(dtype, tuple(y.shape), len(name)), dtype, device)
    (g,) = autograd.grads_of([y], [seed], [x])
    return g, [seed]


def scatter_case(name: str, dtype: str, device: str) -> tuple[tgrad.Tensor, list[tgrad.Tensor]]:
    shape, axis, idx = SCATTER[name]
    w = _tensor(np.zeros(shape, np.float32), dtype, device).requires_grad_()
    ix = tgrad.tensor(idx, dtype=tgrad.int32, device=device)
    y = tgrad.take(w, ix, axis)
    rng = np.random.default_rng(len(name))
    vals = (rng.standard_normal(tuple(y.shape)) * np.exp2(rng.integers(-12, 12, tuple(y.shape)))).astype(np.float32)
    if vals.size > 8:  # special values among ordinary ones: NaN, infinities, signed zeros, subnormals
        specials = _bits(dtype, (8,), 3).astype(np.float32)
        vals.reshape(-1)[:: max(1, vals.size // 8)][:8] = specials[: len(vals.reshape(-1)[:: max(1, vals.size // 8)][:8])]
    seed = _tensor(vals, dtype, device)
    (g,) = autograd.grads_of([y], [seed], [w])
    return g, [seed, ix]


def optim_case(name: str, which: int, device: str) -> tuple[tgrad.Tensor, list[tgrad.Tensor]]:
    algo, flags, n, scalars = OPTIM[name]
    arrays = _optim_inputs(name, n)
    leaves = [_tensor(a, "float32", device) for a in arrays]
    ins = [leaves[0], leaves[1][::-1]] + leaves[2:]  # a view: the kernel reads through it
    return _kernel.step(algo, which, flags, ins, scalars), leaves


def _bytes(t: tgrad.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8).copy()


def _result(build: Callable[..., Any], *args: Any) -> np.ndarray:
    t, _ = build(*args)
    return _bytes(t)


ALL: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = (
    [(f"place_{n}_{d}", place_case, (n, d)) for n in PLACE for d in DTYPES]
    + [(f"scatter_add_{n}_{d}", scatter_case, (n, d)) for n in SCATTER for d in DTYPES]
    + [(f"optim_{n}_out{w}", optim_case, (n, w)) for n, w in OPTIM_CASES])
IDS = [c[0] for c in ALL]


# ---- rendering (core) ------------------------------------------------------------------------------
@pytest.mark.parametrize("lang", ["msl", "opencl", "cuda"])
def test_the_gradient_kinds_render_in_every_language(lang: str) -> None:
    seen = set()
    for _, build, args in ALL:
        t, _ = build(*args, "cpu")
        steps = t.explain(json=True)["steps"]
        assert steps, "the result is pending"
        for i, step in enumerate(steps):
            k = R.render_tensor(t, None, lang, step=i)
            assert k.route == step["op"] and k.route in ("place", "scatter_add", "optim_step"), step
            assert k.threadgroup == (256, 1, 1) and "c" in k.buffer_names
            seen.add((k.name, k.source_hash))
    assert len({n for n, _ in seen}) == len(seen), "one entry-point name per kernel text"


# ---- PoCL ---------------------------------------------------------------------------------------
@needs_opencl
@pytest.mark.parametrize(("build", "args"), [(c[1], c[2]) for c in ALL], ids=IDS)
def test_pocl_runs_the_gradient_kinds_with_the_cpu_bytes(build: Callable[..., Any], args: tuple[Any, ...]) -> None:
    t, _ = build(*args, "opencl")
    assert t.device == "opencl"
    assert np.array_equal(_bytes(t), _result(build, *args, "cpu"))


def train_mlp(device: str) -> list[np.ndarray]:
    """Three AdamW steps of a two-layer MLP (matmul, relu, a sliced weight, a mean squared error):
    the parameters' and the optimizer state's bytes after them."""
    rng = np.random.default_rng(7)
    w1 = tgrad.Tensor.from_numpy(rng.standard_normal((6, 16)).astype(np.float32) * 0.3, device=device)
    w2 = tgrad.Tensor.from_numpy(rng.standard_normal((16, 3)).astype(np.float32) * 0.3, device=device)
    params = [w1.requires_grad_(), w2.requires_grad_()]
    opt = tgrad.optim.AdamW(params, lr=1e-2, weight_decay=0.01)
    for _ in range(3):
        x = tgrad.Tensor.from_numpy(rng.standard_normal((8, 6)).astype(np.float32), device=device)
        y = tgrad.Tensor.from_numpy(rng.standard_normal((8, 3)).astype(np.float32), device=device)
        h = (x @ params[0]).relu()
        d = h[:, 1:] @ params[1][1:] - y
        loss = (d * d).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = [_bytes(p) for p in params]
    for s in opt.state.values():
        out += [_bytes(v) for _, v in sorted(s.items()) if isinstance(v, tgrad.Tensor)]
    return out


def train_classifier(device: str) -> list[np.ndarray]:
    """Two AdamW steps of an embedding and a linear layer under cross-entropy (take, scatter_add,
    log_softmax and its backward, where, sums): the parameters' bytes after them."""
    import tgrad.nn.functional as F

    rng = np.random.default_rng(1)
    w = tgrad.Tensor.from_numpy(rng.standard_normal((6, 5)).astype(np.float32) * 0.3, device=device)
    emb = tgrad.Tensor.from_numpy(rng.standard_normal((10, 6)).astype(np.float32) * 0.3, device=device)
    params = [w.requires_grad_(), emb.requires_grad_()]
    opt = tgrad.optim.AdamW(params, lr=1e-2)
    for _ in range(2):
        tok = tgrad.tensor(rng.integers(0, 10, 8).astype(np.int32), dtype=tgrad.int32, device=device)
        lab = tgrad.tensor(rng.integers(0, 5, 8).astype(np.int32), dtype=tgrad.int32, device=device)
        loss = F.cross_entropy(F.embedding(tok, params[1]) @ params[0], lab)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [_bytes(p) for p in params]


def train_normed(device: str) -> list[np.ndarray]:
    """Two SGD steps of linear -> rms_norm (weighted) -> relu -> linear -> layer_norm (weight and
    bias) -> squared error: the norms' x and weight gradients (float32 rsqrt in the latter) on the
    device. The parameters' bytes after them."""
    import tgrad.nn.functional as F

    rng = np.random.default_rng(2)
    shapes = {"w1": (6, 16), "g1": (16,), "w2": (16, 8), "g2": (8,), "b2": (8,)}
    params = {k: tgrad.Tensor.from_numpy(rng.standard_normal(s).astype(np.float32) * 0.5, device=device).requires_grad_()
              for k, s in shapes.items()}
    opt = tgrad.optim.SGD(list(params.values()), lr=0.05, momentum=0.9)
    for _ in range(2):
        x = tgrad.Tensor.from_numpy(rng.standard_normal((5, 6)).astype(np.float32), device=device)
        y = tgrad.Tensor.from_numpy(rng.standard_normal((5, 8)).astype(np.float32), device=device)
        h = F.rms_norm(x @ params["w1"], (16,), params["g1"].to(tgrad.bfloat16)).relu()
        z = F.layer_norm(h @ params["w2"], (8,), params["g2"].to(tgrad.bfloat16), params["b2"].to(tgrad.bfloat16))
        d = z.float() - y
        opt.zero_grad()
        (d * d).mean().backward()
        opt.step()
    return [_bytes(p) for p in params.values()]


def train_gated(device: str) -> list[np.ndarray]:
    """Three AdamW steps of a Llama-style gated MLP (silu(x w1) * (x w3) then w2), with a gelu and
    a tanh-gelu layer before it, under a squared error: silu_backward, gelu_backward and
    gelu_tanh_backward (g times f'(x) from their tables of f'(x)) on the device. The parameters' and
    the optimizer state's bytes after them."""
    import tgrad.nn.functional as F

    rng = np.random.default_rng(3)
    shapes = {"w0": (6, 8), "w1": (8, 16), "w3": (8, 16), "w2": (16, 4)}
    params = {k: tgrad.Tensor.from_numpy(rng.standard_normal(s).astype(np.float32) * 0.5, device=device).requires_grad_()
              for k, s in shapes.items()}
    opt = tgrad.optim.AdamW(list(params.values()), lr=1e-2, weight_decay=0.01)
    for _ in range(3):
        x = tgrad.Tensor.from_numpy(rng.standard_normal((5, 6)).astype(np.float32) * 2, device=device)
        y = tgrad.Tensor.from_numpy(rng.standard_normal((5, 4)).astype(np.float32), device=device)
        h = F.gelu(F.gelu(x @ params["w0"]), approximate="tanh")
        d = (F.silu(h @ params["w1"]) * (h @ params["w3"])) @ params["w2"] - y
        opt.zero_grad()
        (d * d).mean().backward()
        opt.step()
    out = [_bytes(p) for p in params.values()]
    for s in opt.state.values():
        out += [_bytes(v) for _, v in sorted(s.items()) if isinstance(v, tgrad.Tensor)]
    return out


@needs_opencl
def test_pocl_trains_a_gated_silu_mlp_with_the_cpu_bytes() -> None:
    """silu's, gelu's and gelu_tanh's derivatives in a backward pass on the device: the CPU's bytes."""
    cpu, dev = train_gated("cpu"), train_gated("opencl")
    assert len(cpu) == len(dev) > 4
    for a, b in zip(cpu, dev):
        assert np.array_equal(a, b)


@needs_opencl
def test_pocl_trains_normed_layers_with_the_cpu_bytes() -> None:
    for a, b in zip(train_normed("cpu"), train_normed("opencl")):
        assert np.array_equal(a, b)


@needs_opencl
def test_pocl_trains_a_classifier_with_the_cpu_bytes() -> None:
    """Embedding, linear, cross-entropy (log_softmax's backward on the device) and AdamW."""
    for a, b in zip(train_classifier("cpu"), train_classifier("opencl")):
        assert np.array_equal(a, b)


@needs_opencl
def test_pocl_trains_an_mlp_with_the_cpu_bytes() -> None:
    """Forward, backward (matmul, relu, place, reductions) and AdamW, three steps, all on the device."""
    cpu, dev = train_mlp("cpu"), train_mlp("opencl")
    assert len(cpu) == len(dev) > 2
    for a, b in zip(cpu, dev):
        assert np.array_equal(a, b)


# ---- the emulators ---------------------------------------------------------------------------------
def positions(k: Any, memory: dict[int, np.ndarray]) -> np.ndarray:
    """scatter_add's binding pos as the device executor makes it (ops/gather.c), made here by numpy:
    for each index j of the axis, where its list of positions q starts (n + 1 offsets), then the
    lists, each ascending."""
    ix = k.buffer_names.index("ix")
    offset = int(re.search(r"ix \(offset (\d+)\)", k.source).group(1))
    values = memory[k.buffer_ids[ix]].view(np.int32)[offset:int(k.buffer_elements[ix])].astype(np.int64)
    n = int(k.buffer_elements[k.buffer_names.index("pos")]) - 1 - len(values)
    named = np.where(values < 0, values + n, values)
    starts = np.concatenate([[0], np.cumsum(np.bincount(named, minlength=n))])
    return np.concatenate([starts, np.argsort(named, kind="stable")]).astype(np.uint32)


def emulated(harness: Any, build: Callable[..., Any], args: tuple[Any, ...],
             edit: Callable[[str], str] | None = None) -> np.ndarray:
    """The case's kernels run on an emulator, buffers moved by id as the device would."""
    t, leaves = build(*args, "cpu")
    memory: dict[int, np.ndarray] = {}
    for leaf in leaves:
        memory[leaf.buffer_id] = np.ascontiguousarray(leaf.numpy()).reshape(-1).view(UINT[leaf.dtype.itemsize]).copy()
    scalars = np.array(OPTIM[args[0]][3] + [0.0] * 8, np.float32)[:8].view(np.uint32) if build is optim_case else None
    kernels = [R.render_tensor(t, None, harness.lang, step=i) for i in range(len(t.explain(json=True)["steps"]))]
    sources = [edit(k.source) if edit else k.source for k in kernels]
    harness.emu.compile_many([s for s, k in zip(sources, kernels) if 0 not in k.grid])
    kind = UINT[t.dtype.itemsize]
    for k, src in zip(kernels, sources):
        out_at = k.buffer_names.index("c")
        bufs = []
        for j, (bid, n) in enumerate(zip(k.buffer_ids, k.buffer_elements)):
            if j == out_at:
                bufs.append(np.full(n, np.iinfo(kind).max, kind))  # unwritten: all ones
            elif k.buffer_names[j] == "q":
                bufs.append(scalars.copy())
            elif k.buffer_names[j] == "pos":
                bufs.append(positions(k, memory))
            else:
                bufs.append(memory[bid][:n])
        if 0 not in k.grid:
            bufs = harness.emu.run(harness.emu.compile(src), k.grid, k.threadgroup, bufs,
                                   [i != out_at for i in range(len(bufs))])
        memory[k.buffer_ids[out_at]] = bufs[out_at]
    return memory[t.buffer_id].view(np.uint8).copy()


@needs_cxx
@pytest.mark.slow
@pytest.mark.parametrize(("build", "args"), [(c[1], c[2]) for c in ALL], ids=IDS)
def test_generated_msl_runs_the_gradient_kinds_with_the_cpu_bytes(msl: Any, build: Callable[..., Any],
                                                                  args: tuple[Any, ...]) -> None:
    assert np.array_equal(emulated(msl, build, args), _result(build, *args, "cpu"))


@needs_cxx
@pytest.mark.cuda
@pytest.mark.parametrize(("build", "args"), [(c[1], c[2]) for c in ALL], ids=IDS)
def test_generated_cuda_runs_the_gradient_kinds_with_the_cpu_bytes(cuda: Any, build: Callable[..., Any],
                                                                   args: tuple[Any, ...]) -> None:
    assert np.array_equal(emulated(cuda, build, args), _result(build, *args, "cpu"))


@needs_cxx
@pytest.mark.slow
def test_the_emulator_catches_a_scatter_add_that_drops_the_last_position_of_each_index(msl: Any) -> None:
    """Each output element sums the positions the host listed for its index (binding pos): a loop
    that stops one short loses the repeated indices' last terms."""
    def broken(src: str) -> str:
        out = src.replace("const int end = pos[j + 1];", "const int end = pos[j + 1] - 1;")
        assert out != src
        return out

    args = ("axis0_repeats", "bfloat16")
    assert not np.array_equal(emulated(msl, scatter_case, args, broken), _result(scatter_case, *args, "cpu"))


@needs_cxx
@pytest.mark.slow
def test_the_emulator_catches_a_place_with_a_wrong_stride(msl: Any) -> None:
    def broken(src: str) -> str:
        out = re.sub(r"r / (\d+);", lambda m: f"r / {int(m.group(1)) + 1};", src, count=1)
        assert out != src
        return out

    args = ("slice_step", "float32")
    assert not np.array_equal(emulated(msl, place_case, args, broken), _result(place_case, *args, "cpu"))


@needs_cxx
@pytest.mark.slow
def test_the_emulator_catches_an_optimizer_that_rounds_its_fused_step_twice(msl: Any) -> None:
    """AdamW's m = fma(d, w, m) as a rounded product then a rounded sum: some elements differ.
    (tg_f32_fma's own sticky bit is checked on drawn halfway cases by tests/c/test_gpu_optim.c.)"""

    def broken(src: str) -> str:
        out = src.replace("tg_f32_fma(d, s.s1, m)", "tg_f32_add(tg_f32_mul(d, s.s1), m)")
        assert out != src
        return out

    args = ("adamw", 1)
    assert not np.array_equal(emulated(msl, optim_case, args, broken), _result(optim_case, *args, "cpu"))
