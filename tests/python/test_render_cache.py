"""The render cache of GPU kernels (libtgrad/src/render_cache.h, docs/kernels.md "The render
cache"): a hit gives the text, launch and bindings the step's renderer gives; steps that differ in
a view, a dtype, a parameter, a fused op or the language miss; the counters and modes of
tgrad_debug_render_cache; and on a device, a model's bytes with the cache on equal its bytes with
the cache off.

The tests session runs every test with TGRAD_RENDER_CACHE=verify (noxfile.py), which renders each
hit again and fails the step when the texts differ: these tests set the modes they need and put
back the session's."""

from __future__ import annotations

import os
from dataclasses import replace
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import tgrad
from tgrad import render as R
from tgrad._ffi import ffi, lib

N = int(lib.TGRAD_DEBUG_RENDER_CACHE_COUNT)


def counts() -> dict[str, int]:
    c = ffi.new("int64_t[]", N)
    assert lib.tgrad_debug_render_cache(-1, c, N) == 0
    names = ("hits", "misses", "entries", "bytes", "launch_differences", "text_differences", "render_ns", "renders")
    return {name: int(c[getattr(lib, f"TGRAD_DEBUG_RENDER_CACHE_{name.upper()}")]) for name in names}


def set_mode(mode: int) -> None:
    assert lib.tgrad_debug_render_cache(mode, ffi.NULL, 0) == 0


@pytest.fixture(autouse=True)
def session_mode() -> Iterator[None]:
    yield
    env = os.environ.get("TGRAD_RENDER_CACHE", "")
    set_mode(0 if env == "0" else 2 if env == "verify" else 1)


def bf16(*shape: int, seed: int = 0) -> tgrad.Tensor:
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return tgrad.Tensor.from_numpy(values).bfloat16()


def graphs() -> list[Callable[[], tgrad.Tensor]]:
    """Pending tensors of many kinds, each made again by its call (new buffers, the same views)."""
    x, w, g = bf16(8, 8), bf16(8, 8, seed=1), bf16(8, 8, seed=2)
    pos = tgrad.Tensor.from_numpy(np.arange(8, dtype=np.int32), dtype=tgrad.int32)
    idx = tgrad.Tensor.from_numpy(np.array([3, 0, 7], np.int32), dtype=tgrad.int32)
    return [
        lambda: tgrad.gelu(x @ w + g),                       # a matmul, its epilogue
        lambda: (x.T * 2.0) - g,                             # an elementwise chain over a transposed view
        lambda: (x * g).sum(axis=1),                         # a reduction, its prologue
        lambda: tgrad.softmax(x.float(), dim=-1),            # route softmax (double)
        lambda: tgrad.rms_norm(x, 8, w[0], 1e-5),            # route norm
        lambda: tgrad.rope(x.reshape(1, 1, 8, 8), pos, 10000.0),  # route rope
        lambda: tgrad.take(x, idx, axis=0),                  # gather
        lambda: tgrad.cat([x, g], dim=1),                    # concat
        lambda: x.float(),                                   # cast
        lambda: tgrad.where(x > g, x, g),                    # compare, where
    ]


def pattern(ids: tuple[int, ...]) -> tuple[int, ...]:
    """Which bindings share a buffer (each id as the index of its first binding), tables as -1."""
    return tuple(-1 if i == 0 else ids.index(i) for i in ids)


def render(make: Callable[[], tgrad.Tensor], lang: str) -> R.Kernel:
    return R.render_tensor(make(), lang=lang)


@pytest.mark.parametrize("lang", ["msl", "opencl", "cuda"])
def test_a_hit_is_what_the_step_renders(lang: str) -> None:
    set_mode(0)
    made = graphs()
    whole = [render(make, lang) for make in made]
    assert counts()["hits"] == counts()["misses"] == 0  # off: nothing looked up
    set_mode(1)
    first = [render(make, lang) for make in made]
    after = counts()  # render_tensor renders a step twice: for the length, then the text
    assert after["misses"] == after["entries"] == len(made) and after["hits"] == after["misses"]
    again = [render(make, lang) for make in made]
    end = counts()
    assert end["hits"] == after["hits"] + 2 * len(made) and end["misses"] == after["misses"]
    assert end["entries"] == after["entries"] and end["renders"] == end["hits"] + end["misses"]
    assert end["launch_differences"] == end["text_differences"] == 0
    for a, b, c in zip(whole, first, again):
        assert replace(a, buffer_ids=()) == replace(b, buffer_ids=()) == replace(c, buffer_ids=())
        # the bindings are the launch's own: the same pattern, this graph's buffers (the inputs
        # are the same tensors, the result a new one)
        assert pattern(a.buffer_ids) == pattern(b.buffer_ids) == pattern(c.buffer_ids)
        assert set(c.buffer_ids) - set(b.buffer_ids)


def test_what_differs_misses() -> None:
    """The same shape through another view, dtype, parameter, fused op or language is another
    kernel: each a miss with its own text, then a hit."""
    x, y = bf16(8, 8), bf16(8, 8, seed=1)
    variants = [
        lambda: x + y,
        lambda: x.T + y,                       # strides
        lambda: x[1:, :] + y[1:, :],           # offset and shape
        lambda: x.float() + y.float(),         # dtype
        lambda: x * y,                         # op
        lambda: tgrad.relu(x + y),             # a fused op
        lambda: tgrad.softmax(x, dim=0),       # a parameter (the axis)
        lambda: tgrad.softmax(x, dim=1),
    ]
    set_mode(0)
    whole = {lang: [render(v, lang).source for v in variants] for lang in ("msl", "opencl")}
    set_mode(1)
    for lang in ("msl", "opencl"):
        for _ in range(2):
            assert [render(v, lang).source for v in variants] == whole[lang]
    c = counts()  # each variant a miss once per language, then hits (two renders a render_tensor)
    assert c["misses"] == 2 * len(variants) and c["hits"] == 2 * 4 * len(variants) - c["misses"]
    assert len(set(whole["msl"])) == len(variants)  # each one its own kernel
    assert c["launch_differences"] == c["text_differences"] == 0


def test_verify_mode_renders_each_hit_again() -> None:
    set_mode(2)
    made = graphs()
    for _ in range(3):
        for make in made:
            render(make, "msl")
    c = counts()
    assert c["misses"] == len(made) and c["hits"] == 5 * len(made)  # two renders a render_tensor
    assert c["text_differences"] == c["launch_differences"] == 0
    assert c["renders"] == c["hits"] + c["misses"] and c["render_ns"] > 0  # a verified hit counts once


def test_modes_empty_the_cache_and_arguments_are_checked() -> None:
    set_mode(1)
    render(graphs()[0], "msl")
    assert counts()["entries"] >= 1 and counts()["bytes"] > 0
    set_mode(1)
    assert counts() == {name: 0 for name in counts()}  # a mode set: emptied, counters zeroed
    for mode, c, n in ((3, ffi.NULL, 0), (-2, ffi.NULL, 0), (1, ffi.NULL, 1), (1, ffi.new("int64_t[9]"), N + 1),
                       (1, ffi.new("int64_t[1]"), -1)):
        assert lib.tgrad_debug_render_cache(mode, c, n) == lib.TGRAD_ERR_INVALID_ARGUMENT
    partial = ffi.new("int64_t[2]", [-7, -7])
    assert lib.tgrad_debug_render_cache(-1, partial, 1) == 0 and partial[1] == -7  # only count entries written


def test_a_model_on_a_device_gives_the_same_bytes_with_and_without_it(opencl_device: str, tmp_path: Path) -> None:
    import tgrad.models
    from model_dirs import model_dir

    path = model_dir(tmp_path / "m", num_hidden_layers=2, hidden_size=32, vocab_size=96, intermediate_size=64,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    ids = np.random.default_rng(3).integers(0, 96, (1, 6))

    def run() -> tuple[bytes, bytes]:
        model = tgrad.models.from_pretrained(path, device="opencl")
        return model(ids).numpy().tobytes(), np.asarray(model.generate(ids, 4)).tobytes()

    set_mode(0)
    off = run()
    set_mode(1)
    on = [run(), run()]  # the second model's kernels all hits
    c = counts()
    assert c["hits"] > c["misses"] > 0 and c["text_differences"] == c["launch_differences"] == 0
    assert on[0] == off and on[1] == off
