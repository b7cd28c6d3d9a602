"""Every GPU kind on a real CUDA device (issue 37): the rosters that PoCL and the CUDA emulator run
in CI, run on `device="cuda"` against the CPU's bytes, by the same helpers as the PoCL tests
(test_gpu_*.py), plus every elementwise op over every bf16 input, attention, the Llama, the
gradient's kinds (place, scatter_add, optim_step) and an MLP trained on the device.

Skipped where the backend is unavailable (every machine without an NVIDIA GPU and driver, CI
included), failed instead under TGRAD_REQUIRE_CUDA=1 (a run on a GPU, docs/cuda.md).
TGRAD_TEST_KINDS_DEVICE=opencl runs the same module on PoCL: that is how the module itself is
checked on a machine without a GPU (it duplicates the PoCL tests, so CI does not run it that way).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tgrad
import tgrad.models
from tgrad import errors
from tgrad._ffi import ffi, lib

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_gpu_batched as batched  # noqa: E402
import test_gpu_cast as cast  # noqa: E402
import test_gpu_compare as compare  # noqa: E402
import test_gpu_elementwise_f32 as ew32  # noqa: E402
import test_gpu_grad_kinds as grad_kinds  # noqa: E402
import test_gpu_matmul_f32 as mm32  # noqa: E402
import test_gpu_norm as norm  # noqa: E402
import test_gpu_random as rand  # noqa: E402
import test_gpu_reduce as reduce  # noqa: E402
import test_gpu_rope as rope  # noqa: E402
import test_gpu_select as select  # noqa: E402
import test_gpu_softmax as softmax  # noqa: E402
from model_dirs import model_dir  # noqa: E402
from test_models_device import IDS, _same  # noqa: E402
from test_norms import _rows  # noqa: E402

DEVICE = os.environ.get("TGRAD_TEST_KINDS_DEVICE", "cuda")


@pytest.fixture
def dev(request: pytest.FixtureRequest) -> str:
    """The device under test: the cuda_device fixture's check (skip, or fail under
    TGRAD_REQUIRE_CUDA=1), or opencl_device's for TGRAD_TEST_KINDS_DEVICE=opencl."""
    if DEVICE not in ("cuda", "opencl"):
        pytest.fail(f"TGRAD_TEST_KINDS_DEVICE={DEVICE!r}: cuda or opencl")
    request.getfixturevalue(f"{DEVICE}_device")
    return DEVICE


def _u8(t: tgrad.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8).copy()


def _first(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"shape {got.shape}, want {want.shape}"
    bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
    return f"{bad.size} of {want.size} differ" + (f"; first at {bad[0]}" if bad.size else "")


# ---- products ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", batched.ORDERS)
@pytest.mark.parametrize("route", ["tiled", "naive"])
def test_batched_products_give_the_cpu_bytes(route: str, order: str, dev: str) -> None:
    for case in batched.CASES:  # the core and the slow roster
        want = batched.cpu_bytes(case, order)
        got = batched.device_bytes(case, order, route, device=dev)
        assert np.array_equal(got, want), f"{case.id} {route} {order}: " + batched._describe(got, want)
    for case in batched.CORE:
        want = batched.cpu_bytes(case, order, epilogue=True)
        got = batched.device_bytes(case, order, "auto", epilogue=True, device=dev)
        assert np.array_equal(got, want), f"{case.id} epilogue {order}: " + batched._describe(got, want)


@pytest.mark.parametrize("order", mm32.ORDERS)
@pytest.mark.parametrize("route", ["naive", "tiled"])
def test_float32_products_store_the_cpu_accumulators(route: str, order: str, dev: str) -> None:
    for m, k, n in mm32.SHAPES:
        a_bits, b_bits = mm32._special_bits((m, k), m + k), mm32._special_bits((n, k), n + 7 * k)
        want = mm32._f32_bits(mm32._product(tgrad.Tensor.from_bf16_bits(a_bits),
                                            tgrad.Tensor.from_bf16_bits(b_bits).T, order))
        a, b = tgrad.Tensor.from_bf16_bits(a_bits).to(dev), tgrad.Tensor.from_bf16_bits(b_bits).to(dev)
        got = mm32._on_device(lambda: mm32._product(a, b.T, order), route, device=dev)
        assert np.array_equal(got, want), f"{(m, k, n)} {route} {order}: {_first(got, want)}"


# ---- elementwise: every bf16 input of every op the device renders --------------------------------------
ALL_BF16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
#: The ops the integer-only GPU prelude has no spelling for (docs/kernels.md): refused on a device.
NO_DEVICE_SPELLING = {"pow"}


def _bf16(bits: np.ndarray, device: str) -> tgrad.Tensor:
    return tgrad.Tensor.from_bf16_bits(np.ascontiguousarray(bits, np.uint16)).to(device)


def _binary_operands() -> tuple[np.ndarray, np.ndarray]:
    """Every bf16 value against a random partner, and 2^16 random pairs of nearby binades."""
    rng = np.random.default_rng(11)
    a1 = ALL_BF16
    b1 = rng.integers(0, 1 << 16, a1.size).astype(np.uint16)
    a2 = rng.integers(0, 1 << 16, a1.size).astype(np.uint16)
    b2 = ((a2.astype(np.int32) + rng.integers(-0x400, 0x400, a1.size)) & 0xFFFF).astype(np.uint16)
    return np.concatenate([a1, a2]), np.concatenate([b1, b2])


def test_every_elementwise_op_on_every_bf16_input_gives_the_cpu_bytes(dev: str) -> None:
    a_bits, b_bits = _binary_operands()
    refused = set()
    for name, info in tgrad.ops.REGISTRY.items():
        operands = (ALL_BF16,) if info.arity == 1 else (a_bits, b_bits)
        want = tgrad.ops.apply(name, *(_bf16(x, "cpu") for x in operands)).numpy().view(np.uint16)
        try:
            y = tgrad.ops.apply(name, *(_bf16(x, dev) for x in operands))
            got = y.numpy().view(np.uint16)
        except errors.RouteNotEligibleError:
            refused.add(name)
            continue
        assert np.array_equal(got, want), f"{name}: {_first(got, want)}"
    assert refused == NO_DEVICE_SPELLING, refused ^ NO_DEVICE_SPELLING


def test_float32_elementwise_ops_give_the_cpu_bytes(dev: str) -> None:
    a, b = ew32.pairs(0, 1 << 16)
    for name, op in ew32.BINARY.items():
        want = ew32._bits(op(ew32._f32(a), ew32._f32(b)))
        got = ew32._bits(op(ew32._f32(a, dev), ew32._f32(b, dev)))
        assert not ew32._differ(got, want, a, b), f"{name}: {ew32._differ(got, want, a, b)}"
    x = np.concatenate([a, b])
    for name, unary in ew32.UNARY.items():
        want, got = ew32._bits(unary(ew32._f32(x))), ew32._bits(unary(ew32._f32(x, dev)))
        assert not ew32._differ(got, want, x), f"{name}: {ew32._differ(got, want, x)}"


def test_casts_compares_and_selects_give_the_cpu_bytes(dev: str) -> None:
    for name in cast.CASES:
        assert np.array_equal(cast._result(name, dev), cast._result(name)), name
    for name in compare.CMP_CASES:
        for op in compare.OPS:
            assert np.array_equal(compare._cmp_result(name, op, dev), compare._cmp_result(name, op, "cpu")), (name, op)
    for name in compare.WHERE_CASES:
        for dtype in compare.DTYPES:
            assert np.array_equal(compare._where_result(name, dtype, dev),
                                  compare._where_result(name, dtype, "cpu")), (name, dtype)


def test_gather_concat_and_slice_scatter_give_the_cpu_bytes(dev: str) -> None:
    for name in select.CASES:
        for dtype in select.DTYPES:
            got, want = select._result(name, dtype, dev), select._result(name, dtype, "cpu")
            assert np.array_equal(got, want), (name, dtype)


def test_the_generator_draws_the_cpu_bytes(dev: str) -> None:
    for draw in rand.DRAWS:
        with draw.make(dev) as t:
            assert t.device == dev
            got = rand._bytes(t)
        want = rand.cpu_bytes(draw)
        assert np.array_equal(got, want), f"{draw.name}: {rand._first_difference(got, want)}"


# ---- reductions and the row kinds ---------------------------------------------------------------------
def test_reductions_give_the_cpu_bytes_fused_or_not(dev: str) -> None:
    saved = tgrad.fusion_enabled()
    try:
        for case in reduce.CI:
            reduce._check_device(case, dev)
    finally:
        tgrad.set_fusion(saved)


@pytest.mark.parametrize("op", softmax.OPS)
def test_softmax_kinds_give_the_cpu_bytes(op: str, dev: str) -> None:
    rng = np.random.default_rng(3)
    for dtype, out_dtype in softmax.DTYPES:
        x = rng.standard_normal((3, 5, 19)) * np.exp2(rng.integers(-3, 6, (3, 5, 1)))
        for dim in (0, 1, 2):
            softmax._same(x, dtype, op, dim, out_dtype, device=dev)
        softmax._same(x, dtype, op, 1, out_dtype, view=lambda t: t.transpose(0, 2), device=dev)
        for row in softmax.ADVERSARIAL:
            softmax._same(np.array([row]), dtype, op, -1, out_dtype, device=dev)
        softmax._same(rng.standard_normal((4, 4099)) * 6, dtype, op, -1, out_dtype, device=dev)
    rows = softmax._device_rows()
    if op == "log_softmax":  # the rows only binary128 decides: the kernel flags both, the host reruns them
        softmax._same(softmax.BOUNDARY, "float32", op, -1, "bfloat16", device=dev)
        assert softmax._device_rows() - rows == 2
    elif op == "softmax":  # NaN and +inf rows: special, the host's
        softmax._same(np.array(softmax.ADVERSARIAL[4:8]), "float32", op, device=dev)
        assert softmax._device_rows() - rows == 4


@pytest.mark.parametrize("op,eps,weighted,biased", norm.CONFIGS)
def test_norms_give_the_cpu_bytes(op: str, eps: float, weighted: bool, biased: bool, dev: str) -> None:
    rng = np.random.default_rng(1)
    for name, bits in _rows(rng).items():
        x = norm._bits_to_f32(bits)[None, :].repeat(3, 0)
        w, b = norm._operands(name, x, rng)
        norm._same(op, x, x.shape[-1], w if weighted else None, b if biased else None, eps, device=dev)
    x = rng.standard_normal((2, 3, 40)).astype(np.float32) * 4
    norm._same(op, x, 40, None, None, eps, view=lambda t: t.transpose(0, 1), device=dev)
    norm._same(op, rng.standard_normal((3, 5000)).astype(np.float32), 5000, None, None, eps, device=dev)


def test_a_norm_midpoint_row_is_rerun_on_the_host(dev: str) -> None:
    x = np.array([[3.0, 1.0, 1.0, 5.0]] * 2, np.float32)
    w = np.full(4, 255 / 128, np.float32)
    d0 = norm._device_rows()
    norm._same("rms_norm", x, 4, w, None, 0.0, device=dev)
    assert norm._device_rows() - d0 == 2


@pytest.mark.parametrize("kw,batched_pos,backward", rope.CONFIGS)
def test_rope_gives_the_cpu_bytes(kw: dict, batched_pos: bool, backward: bool, dev: str) -> None:
    rng = np.random.default_rng(len(str(kw)) + 7 * batched_pos + 13 * backward)
    x, pos, inv, k = rope._case(kw, batched_pos, rng)
    rope._same(x, pos, inv, k, backward, device=dev)
    x[0, 1, 2, 3], x[1, 0, 5, 0], x[1, 2, 7, 9] = np.inf, np.nan, -np.inf
    rope._same(x, pos, inv, k, backward, device=dev)
    big = (rng.standard_normal((3, 64, 64)) * 3).astype(np.float32)
    rope._same(big, np.array([2**31 - 1, 10**6, 123456789], np.int32)[:, None].repeat(64, 1), device=dev)
    d0 = rope._device_rows()
    rope._same(*rope.NEAR, device=dev)
    assert rope._device_rows() - d0 == 1


# ---- attention and the model ------------------------------------------------------------------------
def test_attention_gives_the_cpu_bytes(dev: str) -> None:
    import tgrad.nn.functional as F

    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((2, 4, L, 32)).astype(np.float32) for L in (7, 19, 19))
    masked = rng.random((7, 19)) < 0.2
    masks = {"float": np.where(masked, -np.inf, 0.0).astype(np.float32), "bool": ~masked}

    def run(device: str, gqa: bool = False, **kw: Any) -> np.ndarray:
        t = [tgrad.Tensor.from_numpy(x[:, :2] if gqa and i else x, device=device) for i, x in enumerate((q, k, v))]
        if "attn_mask" in kw:
            kw["attn_mask"] = tgrad.Tensor.from_numpy(masks[kw["attn_mask"]], device=device)
        y = F.scaled_dot_product_attention(*t, enable_gqa=gqa, **kw)
        assert y.device == device
        return _u8(y)

    for kw in ({}, {"is_causal": True}, {"attn_mask": "float"}, {"attn_mask": "bool"}, {"scale": 0.3},
               {"gqa": True, "is_causal": True}):
        assert np.array_equal(run(dev, **kw), run("cpu", **kw)), kw


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_dir(tmp_path_factory.mktemp("llama"))


def test_the_llama_gives_the_cpu_logits_and_tokens(llama: Path, dev: str) -> None:
    cpu, gpu = tgrad.models.from_pretrained(llama), tgrad.models.from_pretrained(llama, device=dev)
    assert gpu.device == dev and all(t.device == dev for t in gpu.parameters())
    for dtype in (tgrad.bfloat16, tgrad.float32):
        assert _same(gpu(IDS, logits_dtype=dtype), cpu(IDS, logits_dtype=dtype)), dtype
    want_tokens, want_logits = cpu.generate(IDS, 6, return_logits=True)
    got_tokens, got_logits = gpu.generate(IDS, 6, return_logits=True)
    assert _same(got_tokens, want_tokens) and _same(got_logits, want_logits)
    mask = np.array([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    assert _same(gpu(IDS, attention_mask=mask), cpu(IDS, attention_mask=mask))


def test_the_debug_counters_exist() -> None:
    # the host-rerun counters the row-kind tests read (a renamed counter must fail here, not skip)
    for name in ("SOFTMAX", "NORM"):
        count = int(getattr(lib, f"TGRAD_DEBUG_{name}_COUNT"))
        c = ffi.new("int64_t[]", count)
        assert getattr(lib, f"tgrad_debug_{name.lower()}_slow_path")(c, count) == 0


# ---- the gradient's kinds: place, scatter_add, optim_step, and training -------------------------------
@pytest.mark.parametrize(("build", "args"), [(c[1], c[2]) for c in grad_kinds.ALL], ids=grad_kinds.IDS)
def test_the_gradient_kinds_give_the_cpu_bytes(build: Any, args: tuple[Any, ...], dev: str) -> None:
    t, _ = build(*args, dev)
    assert t.device == dev
    got, want = grad_kinds._bytes(t), grad_kinds._result(build, *args, "cpu")
    assert np.array_equal(got, want), _first(got, want)


def test_an_mlp_trains_with_the_cpu_bytes(dev: str) -> None:
    cpu, got = grad_kinds.train_mlp("cpu"), grad_kinds.train_mlp(dev)
    assert len(cpu) == len(got) > 2
    for a, b in zip(cpu, got):
        assert np.array_equal(a, b), _first(b, a)


def test_a_classifier_and_normed_layers_train_with_the_cpu_bytes(dev: str) -> None:
    for a, b in zip(grad_kinds.train_classifier("cpu"), grad_kinds.train_classifier(dev)):
        assert np.array_equal(a, b), _first(b, a)
    for a, b in zip(grad_kinds.train_normed("cpu"), grad_kinds.train_normed(dev)):
        assert np.array_equal(a, b), _first(b, a)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_the_softmax_backward_ops_give_the_cpu_bytes(op: str, dev: str) -> None:
    import test_gpu_softmax_backward as smb

    for i, (shape, axis) in enumerate(smb.SHAPES):
        for mix in smb.MIXES:
            for mask, special in ((False, None), (True, None), (False, float("nan"))):
                x, g = smb._inputs(op, shape, 10 * i + int(mask), mask, special)
                want = _u8(smb.backward(op, x, g, axis, mix, "cpu"))
                got = smb.backward(op, x, g, axis, mix, dev)
                assert got.device == dev
                assert np.array_equal(_u8(got), want), (op, shape, mix, mask, special)


@pytest.mark.parametrize("op", ["rms", "layer"])
def test_the_norm_backward_ops_give_the_cpu_bytes(op: str, dev: str) -> None:
    import test_gpu_norm_backward as nb

    for i, (shape, naxes) in enumerate(nb.SHAPES):
        for mix in nb.MIXES:
            for weight in (False, True):
                for special, constant in ((None, False), (float("inf"), False), (None, True)):
                    x, g, w = nb._inputs(shape, naxes, i, special, constant)
                    want = _u8(nb.backward(op, x, g, w if weight else None, naxes, mix, "cpu"))
                    got = nb.backward(op, x, g, w if weight else None, naxes, mix, dev)
                    assert got.device == dev
                    assert np.array_equal(_u8(got), want), (op, shape, mix, weight, special, constant)
