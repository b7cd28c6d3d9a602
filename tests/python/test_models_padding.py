"""Batches of prompts of different lengths (tgrad.models' attention_mask) on hand-written tiny
checkpoints: each row's logits at its real positions, and its greedy tokens, are byte for byte
those of its prompt run alone, unpadded; bad masks are refused before any work.
tests/python/test_models_interop.py compares a padded batch with transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tgrad
import tgrad.models
from tgrad import errors

from model_dirs import config, storage_address, weights, write

VOCAB = 96
# odd and even lengths, a one-token prompt, and one past 32 (block32's block of the sum over keys)
LENGTHS = [5, 37, 1, 20]
PROMPTS = [np.random.default_rng(10 + i).integers(0, VOCAB, n) for i, n in enumerate(LENGTHS)]


def _model(tmp_path: Path, kind: str, **overrides: Any) -> tgrad.models.CausalLM:
    doc = config(kind, **overrides)
    return tgrad.models.from_pretrained(write(tmp_path, doc, weights(doc, seed=3)))


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> tgrad.models.CausalLM:
    return _model(tmp_path_factory.mktemp("llama"), "llama")


@pytest.fixture(scope="module")
def models(llama: tgrad.models.CausalLM, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tgrad.models.CausalLM]:
    # Mistral: a window shorter than the prompts, over grouped-query attention (4 heads, 2 KV heads)
    return {"llama": llama, "mistral": _model(tmp_path_factory.mktemp("mistral"), "mistral", sliding_window=6)}


def _batch(prompts: list[np.ndarray], side: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """ids [B, max length] and the mask; the padding holds random token ids (not a benign 0)."""
    rng = np.random.default_rng(seed)
    width = max(len(p) for p in prompts)
    ids = rng.integers(0, VOCAB, (len(prompts), width))
    mask = np.zeros(ids.shape, np.int64)
    for r, p in enumerate(prompts):
        if side == "left":
            where = np.arange(width - len(p), width)
        elif side == "right":
            where = np.arange(len(p))
        else:  # padding between the tokens too
            where = np.sort(rng.choice(width, len(p), replace=False))
        ids[r, where] = p
        mask[r, where] = 1
    return ids, mask


def _alone(model: tgrad.models.CausalLM, prompt: np.ndarray, dtype: Any) -> bytes:
    return bytes(model(prompt[None], logits_dtype=dtype).numpy().tobytes())


@pytest.mark.parametrize("order", ["pairwise", "block32"])
@pytest.mark.parametrize("side", ["left", "right", "holes"])
@pytest.mark.parametrize("which", ["llama", "mistral"])
def test_each_row_of_a_padded_batch_gives_the_bytes_of_its_prompt_alone(
        which: str, side: str, order: str, models: dict[str, tgrad.models.CausalLM]) -> None:
    model = models[which]
    ids, mask = _batch(PROMPTS, side)
    with tgrad.matmul_order(order):
        for dtype in (tgrad.float32, tgrad.bfloat16):
            got = model(ids, attention_mask=mask, logits_dtype=dtype).numpy()
            assert got.shape == (len(PROMPTS), ids.shape[1], VOCAB)
            assert np.isfinite(got.astype(np.float32)).all()  # the padding's rows too
            for r, p in enumerate(PROMPTS):
                real = got[r, mask[r] == 1]
                assert real.tobytes() == _alone(model, p, dtype), (r, dtype)


def test_qwen2_biases_and_the_mask_as_bool_int_or_tensor(tmp_path: Path) -> None:
    model = _model(tmp_path, "qwen2")
    ids, mask = _batch(PROMPTS[:3], "left")
    want = model(ids, attention_mask=mask, logits_dtype=tgrad.float32).numpy()
    for r, p in enumerate(PROMPTS[:3]):
        assert want[r, mask[r] == 1].tobytes() == _alone(model, p, tgrad.float32)
    for other in (mask.astype(bool), mask.astype(np.uint8), mask.tolist(), mask.astype(np.float32),
                  tgrad.Tensor.from_numpy(mask.astype(np.int32), dtype=tgrad.int32)):
        got = model(ids, attention_mask=other, logits_dtype=tgrad.float32).numpy()
        assert got.tobytes() == want.tobytes(), type(other)
    tensor_ids = tgrad.Tensor.from_numpy(ids.astype(np.int32), dtype=tgrad.int32)
    assert model(tensor_ids, attention_mask=mask, logits_dtype=tgrad.float32).numpy().tobytes() == want.tobytes()


def test_each_rows_keys_sit_at_the_slots_of_its_prompt_alone(llama: tgrad.models.CausalLM) -> None:
    """Why the bytes can be equal in every documented order: the attention's sum over keys reads
    row r's keys at slots 0 .. n-1, as its prompt alone does, the masked slots only after them
    (padding left in front would shift the pairs and blocks of the sum)."""
    ids, mask = _batch(PROMPTS, "left")
    cache = llama.new_cache()
    llama(ids, cache=cache, attention_mask=mask).realize()
    for layer in range(2):
        keys = cache.keys[layer]
        assert keys is not None
        got = keys.numpy().reshape(len(PROMPTS), cache.capacity, 2, 8)  # [B, slot, KV heads, head_dim]
        for r, p in enumerate(PROMPTS):
            alone = llama.new_cache()
            llama(p[None], cache=alone).realize()
            held = alone.keys[layer]
            assert held is not None
            want = held.numpy()[0, :, :len(p)].transpose(1, 0, 2)
            assert got[r, :len(p)].tobytes() == np.ascontiguousarray(want).tobytes(), (layer, r)


def test_padded_bytes_do_not_depend_on_threads_or_fusion(llama: tgrad.models.CausalLM) -> None:
    ids, mask = _batch(PROMPTS, "left")
    want = llama(ids, attention_mask=mask, logits_dtype=tgrad.float32).numpy().tobytes()
    tokens = llama.generate(ids, 4, attention_mask=mask).tobytes()
    before = tgrad.num_threads()
    try:
        tgrad.set_num_threads(3)
        tgrad.set_fusion(False)
        assert llama(ids, attention_mask=mask, logits_dtype=tgrad.float32).numpy().tobytes() == want
        assert llama.generate(ids, 4, attention_mask=mask).tobytes() == tokens
    finally:
        tgrad.set_fusion(True)
        tgrad.set_num_threads(before)


def test_a_mask_of_ones_gives_the_bytes_of_no_mask(llama: tgrad.models.CausalLM) -> None:
    ids = np.stack([PROMPTS[1][:12], PROMPTS[3][:12]])
    assert llama(ids, attention_mask=np.ones_like(ids)).to_bytes() == llama(ids).to_bytes()


@pytest.mark.parametrize("which", ["llama", "mistral"])
def test_greedy_tokens_of_a_left_padded_batch_are_each_prompts_own(
        which: str, models: dict[str, tgrad.models.CausalLM]) -> None:
    model = models[which]
    ids, mask = _batch(PROMPTS, "left")
    new, logits = model.generate(ids, 7, attention_mask=mask, return_logits=True)
    assert new.shape == (len(PROMPTS), 7) and logits.shape == (len(PROMPTS), 7, VOCAB)
    for r, p in enumerate(PROMPTS):
        alone, alone_logits = model.generate(p[None], 7, return_logits=True)
        assert np.array_equal(new[r], alone[0]), r
        assert logits[r].tobytes() == alone_logits[0].tobytes(), r
    # padding on the right, or between the tokens, continues the same real tokens
    for side in ("right", "holes"):
        ids2, mask2 = _batch(PROMPTS, side, seed=1)
        assert np.array_equal(model.generate(ids2, 7, attention_mask=mask2), new), side


def test_sampling_and_eos_in_a_padded_batch(llama: tgrad.models.CausalLM) -> None:
    ids, mask = _batch(PROMPTS[:2], "left")
    free = llama.generate(ids, 6, attention_mask=mask)
    eos = int(free[0, 2])
    want, done = free.copy(), np.zeros(len(free), bool)
    for t in range(free.shape[1]):  # a finished row repeats its eos; the others go on as before
        want[:, t] = np.where(done, want[:, t - 1], free[:, t])
        done |= want[:, t] == eos
        if done.all():
            want = want[:, :t + 1]
            break
    assert np.array_equal(llama.generate(ids, 6, attention_mask=mask, eos_token_id=eos), want)
    a = llama.generate(ids, 6, attention_mask=mask, do_sample=True, seed=4, temperature=1.5)
    assert np.array_equal(a, llama.generate(ids, 6, attention_mask=mask, do_sample=True, seed=4, temperature=1.5))


@pytest.mark.parametrize("which", ["llama", "mistral"])
def test_a_padded_cache_fed_in_chunks_gives_the_bytes_of_each_prompt_alone(
        which: str, models: dict[str, tgrad.models.CausalLM]) -> None:
    """Chunks with their own padding, a cache that grows past its capacity, decoding steps
    without a mask, and a cache filled without padding that then takes a padded chunk."""
    model = models[which]
    rows = [np.concatenate([p, q]) for p, q in zip(PROMPTS, PROMPTS[::-1])]
    a, a_mask = _batch([p[:len(p) // 2] for p in rows], "left", seed=2)
    b, b_mask = _batch([p[len(p) // 2:] for p in rows], "right", seed=3)
    cache = model.new_cache(4)
    first = model(a, cache=cache, attention_mask=a_mask, logits_dtype=tgrad.float32).numpy()
    second = model(b, cache=cache, attention_mask=b_mask, logits_dtype=tgrad.float32).numpy()
    assert cache.lengths is not None and list(cache.lengths) == [len(p) for p in rows]
    steps = [model(np.full((len(rows), 1), t), cache=cache, logits_dtype=tgrad.float32).numpy() for t in (7, 8)]
    for r, p in enumerate(rows):
        full = np.concatenate([p, [7, 8]])
        want = model(full[None], logits_dtype=tgrad.float32).numpy()[0]
        got = np.concatenate([first[r, a_mask[r] == 1], second[r, b_mask[r] == 1], steps[0][r], steps[1][r]])
        assert got.tobytes() == want.tobytes(), r
    dense = model.new_cache()
    same = np.stack([p[:3] for p in rows[:2]])
    model(same, cache=dense)
    tail, tail_mask = _batch([rows[0][3:6], rows[1][3:]], "left", seed=4)
    got = model(tail, cache=dense, attention_mask=tail_mask, logits_dtype=tgrad.float32).numpy()
    for r in range(2):
        want = model(rows[r][None, :3 + int(tail_mask[r].sum())], logits_dtype=tgrad.float32).numpy()[0, 3:]
        assert got[r, tail_mask[r] == 1].tobytes() == want.tobytes(), r


@pytest.mark.parametrize("mask, error, match", [
    (np.ones((4, 36)), errors.ShapeMismatchError, "shape"),
    (np.ones((37,)), errors.ShapeMismatchError, "shape"),
    (np.full((4, 37), 2), errors.InvalidArgumentError, "only 0 and 1"),
    (np.full((4, 37), 0.5), errors.InvalidArgumentError, "only 0 and 1"),
    (np.full((4, 37), "1"), errors.InvalidArgumentError, "0s and 1s"),
    (np.r_[np.ones((3, 37)), np.zeros((1, 37))], errors.InvalidArgumentError, "row 3"),
], ids=["columns", "rank", "two", "half", "strings", "empty-row"])
def test_bad_masks_are_refused_before_any_work(llama: tgrad.models.CausalLM, mask: np.ndarray,
                                               error: type[Exception], match: str) -> None:
    ids, good = _batch(PROMPTS, "left")
    cache = llama.new_cache()
    llama(ids[:, :5], cache=cache)
    with pytest.raises(error, match=match):
        llama(ids, attention_mask=mask)
    with pytest.raises(error, match=match):
        llama(ids[:, 5:], cache=cache, attention_mask=mask[:, 5:] if mask.shape == ids.shape else mask)
    with pytest.raises(error, match=match):
        llama.generate(ids, 3, attention_mask=mask)
    assert cache.length == 5 and cache.lengths is None  # unchanged: still continues as before
    want = llama(ids, logits_dtype=tgrad.float32).numpy()[:, 5:]
    assert llama(ids[:, 5:], cache=cache, logits_dtype=tgrad.float32).numpy().tobytes() == want.tobytes()


def test_a_padded_cache_is_written_in_place_while_it_has_room(llama: tgrad.models.CausalLM) -> None:
    ids, mask = _batch(PROMPTS[:3], "left")
    cache = llama.new_cache(40)
    llama(ids, cache=cache, attention_mask=mask).realize()

    def where() -> list[tuple[int, int]]:
        return [(storage_address(k), storage_address(v)) for k, v in zip(cache.keys, cache.values)
                if k is not None and v is not None]

    before = where()
    assert len(before) == 2
    for t in range(3):  # the longest row reaches the capacity: every row writes in place
        llama(np.full((3, 1), t), cache=cache).realize()
        assert where() == before, t  # each row's slice_scatter took the buffers
    assert list(cache.lengths) == [len(p) + 3 for p in PROMPTS[:3]] and cache.capacity == 40
    llama(np.full((3, 1), 5), cache=cache).realize()  # past it: new buffers, twice the size
    assert cache.capacity == 80 and where() != before
