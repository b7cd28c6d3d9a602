"""tgrad.models on hand-written tiny checkpoints (no transformers): loading, the forward pass's
mathematics, KV-cache decoding giving the bytes of a full recompute, generate, and typed errors
for what cannot be run. tests/python/test_models_interop.py checks against transformers itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tgrad
import tgrad.models
from tgrad import errors

from model_dirs import config, model_dir, reference_logits, storage_address, weights, write

IDS = np.random.default_rng(5).integers(0, 96, (2, 12))


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_dir(tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def model(llama: Path) -> tgrad.models.CausalLM:
    return tgrad.models.from_pretrained(llama)


def _close_to_reference(doc: dict[str, Any], w: dict[str, np.ndarray], got: np.ndarray, ids: np.ndarray) -> None:
    want = reference_logits(doc, w, ids)
    # bf16 rounds each intermediate (2^-9 relative): the logits stay within a few percent of the
    # unrounded mathematics (at most 3.7% of the largest here), while a rope, mask or window
    # that is not the model's is off by 75-100% (ignoring the window, or scaled rope read as
    # plain, measured on these weights).
    err = np.abs(got.astype(np.float64) - want)
    assert err.max() <= 0.1 * np.abs(want).max(), err.max() / np.abs(want).max()


# ---- loading and the forward pass -----------------------------------------------------------------
def test_logits_are_bf16_of_shape_batch_length_vocab(model: tgrad.models.CausalLM) -> None:
    logits = model(IDS)
    assert logits.shape == (2, 12, 96) and logits.dtype is tgrad.bfloat16
    assert model(IDS, logits_dtype=tgrad.float32).dtype is tgrad.float32


def test_ids_as_int32_tensor_give_the_same_bytes(model: tgrad.models.CausalLM) -> None:
    tensor = tgrad.Tensor.from_numpy(IDS.astype(np.int32), dtype=tgrad.int32)
    assert model(tensor).to_bytes() == model(IDS).to_bytes()


def test_float32_logits_round_to_the_bf16_logits(model: tgrad.models.CausalLM) -> None:
    wide = model(IDS, logits_dtype=tgrad.float32).numpy()
    assert wide.astype(ml_dtypes.bfloat16).tobytes() == model(IDS).numpy().tobytes()


@pytest.mark.parametrize("kind, overrides", [
    ("llama", {}),
    ("llama", {"tie_word_embeddings": True}),
    ("llama", {"attention_bias": True, "mlp_bias": True}),
    ("mistral", {"sliding_window": 5}),
    ("qwen2", {"num_key_value_heads": 1}),
    ("llama", {"rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}),
    ("llama", {"rope_parameters": {"rope_theta": 100.0, "rope_type": "linear", "factor": 4.0}}),
], ids=["llama", "tied", "llama-bias", "mistral-window", "qwen2-mqa", "llama3-rope", "linear-rope"])
def test_the_forward_pass_computes_the_models_mathematics(tmp_path: Path, kind: str, overrides: dict[str, Any]) -> None:
    doc = config(kind, **overrides)
    w = weights(doc, seed=3)
    m = tgrad.models.from_pretrained(write(tmp_path, doc, w))
    _close_to_reference(doc, w, m(IDS, logits_dtype=tgrad.float32).numpy(), IDS)


def test_older_top_level_rope_settings_read_as_rope_parameters(tmp_path: Path) -> None:
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}
    new = config(rope_parameters={"rope_theta": 5e5, **scaling})
    old = config(rope_theta=5e5, rope_scaling={**scaling, "rope_type": None, "type": "llama3"})
    del old["rope_parameters"]
    w = weights(new)
    a = tgrad.models.from_pretrained(write(tmp_path / "new", new, w))
    b = tgrad.models.from_pretrained(write(tmp_path / "old", old, w))
    assert a(IDS).to_bytes() == b(IDS).to_bytes()
    assert a.config.rope_type == b.config.rope_type == "llama3" and b.config.rope_theta == 5e5


def test_llama3_rope_keeps_high_frequencies_and_divides_low_ones() -> None:
    doc = config(head_dim=64, hidden_size=64, rope_parameters={
        "rope_theta": 5e5, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192})
    inv = tgrad.models.rope_inv_freq(tgrad.models.config_from_dict(doc))
    assert inv is not None and inv.dtype == np.float32 and inv.shape == (32,)
    base = 5e5 ** (-np.arange(0, 64, 2) / 64)
    wavelen = 2 * np.pi / base
    high, low = wavelen < 8192 / 4, wavelen > 8192
    assert high.any() and low.any() and (~high & ~low).any()
    assert np.array_equal(inv[high], base[high].astype(np.float32))
    assert np.array_equal(inv[low], (base[low] / 8).astype(np.float32))
    middle = ~high & ~low
    assert np.all(inv[middle] < base[middle]) and np.all(inv[middle] > base[middle] / 8)


def test_a_sharded_checkpoint_with_its_index_gives_the_same_bytes(tmp_path: Path, model: tgrad.models.CausalLM) -> None:
    doc = config()
    sharded = tgrad.models.from_pretrained(write(tmp_path, doc, weights(doc), shards=3))
    assert sorted(p.name for p in tmp_path.iterdir())[-1] == "model.safetensors.index.json"
    assert sharded(IDS).to_bytes() == model(IDS).to_bytes()


def test_float32_weights_load_with_convert_only(tmp_path: Path, model: tgrad.models.CausalLM) -> None:
    doc = config()
    path = write(tmp_path, doc, weights(doc), dtype=np.float32)
    with pytest.raises(errors.DtypeConversionRefusedError, match="convert=True"):
        tgrad.models.from_pretrained(path)
    converted = tgrad.models.from_pretrained(path, convert=True)  # the values are bf16 already: exact
    assert converted(IDS).to_bytes() == model(IDS).to_bytes()


def test_tied_embeddings_read_no_lm_head(tmp_path: Path) -> None:
    doc = config(tie_word_embeddings=True)
    w = weights(doc)
    assert "lm_head.weight" not in w
    m = tgrad.models.from_pretrained(write(tmp_path, doc, w))
    assert m.lm_head.weight is m.model.embed_tokens.weight


# ---- the KV cache ---------------------------------------------------------------------------------
def _cached_logits(m: tgrad.models.CausalLM, ids: np.ndarray, chunks: list[int], dtype: Any,
                   capacity: int = 0) -> np.ndarray:
    cache, out, at = m.new_cache(capacity), [], 0
    for size in chunks:
        out.append(m(ids[:, at:at + size], cache=cache, logits_dtype=dtype).numpy())
        at += size
    assert cache.length == at == ids.shape[1]
    return np.concatenate(out, axis=1)


@pytest.mark.parametrize("dtype", [tgrad.bfloat16, tgrad.float32], ids=["bf16", "f32"])
def test_decoding_with_the_cache_gives_the_bytes_of_a_full_recompute(model: tgrad.models.CausalLM, dtype: Any) -> None:
    full = model(IDS, logits_dtype=dtype).numpy()
    for chunks in ([1] * 12, [5, 1, 1, 1, 1, 1, 1, 1], [4, 3, 5]):
        for capacity in (0, 5, 12):  # grown from nothing, grown once, preallocated
            assert _cached_logits(model, IDS, chunks, dtype, capacity).tobytes() == full.tobytes(), (chunks, capacity)


def test_the_cache_is_written_in_place_while_it_has_room(model: tgrad.models.CausalLM) -> None:
    cache = model.new_cache(8)
    model(IDS[:, :4], cache=cache).realize()
    where = [(storage_address(k), storage_address(v)) for k, v in zip(cache.keys, cache.values)
             if k is not None and v is not None]
    for i in range(4, 8):
        model(IDS[:, i:i + 1], cache=cache).realize()
        assert [(storage_address(k), storage_address(v)) for k, v in zip(cache.keys, cache.values)
                if k is not None and v is not None] == where  # slice_scatter took the buffers
    model(IDS[:, 8:9], cache=cache).realize()  # past the capacity: new buffers, twice the size
    assert cache.capacity == 16 and all(k is not None and k.shape[2] == 16 for k in cache.keys)
    assert cache.length == 9


def test_a_view_kept_of_an_earlier_cache_keeps_its_values(model: tgrad.models.CausalLM) -> None:
    cache = model.new_cache(12)
    model(IDS[:, :4], cache=cache).realize()
    kept, prefix = cache.keys[1], cache.values[0][:, :, :4]  # the whole buffer, and a view
    assert kept is not None
    before = kept.numpy().tobytes(), prefix.numpy().tobytes()
    want = model(IDS, logits_dtype=tgrad.float32).numpy()[:, 4:]
    got = model(IDS[:, 4:], cache=cache, logits_dtype=tgrad.float32).numpy()
    assert got.tobytes() == want.tobytes()
    assert (kept.numpy().tobytes(), prefix.numpy().tobytes()) == before  # written into copies instead
    assert storage_address(kept) != storage_address(cache.keys[1])


def test_the_cache_matches_a_recompute_under_a_sliding_window(tmp_path: Path) -> None:
    doc = config("mistral", sliding_window=3)
    m = tgrad.models.from_pretrained(write(tmp_path, doc, weights(doc)))
    full = m(IDS, logits_dtype=tgrad.float32).numpy()
    assert _cached_logits(m, IDS, [4] + [1] * 8, tgrad.float32).tobytes() == full.tobytes()


@pytest.mark.parametrize("threads", [1, 3])
def test_cached_bytes_do_not_depend_on_threads_or_fusion(model: tgrad.models.CausalLM, threads: int) -> None:
    want = _cached_logits(model, IDS, [6] + [1] * 6, tgrad.float32).tobytes()
    before = tgrad.num_threads()
    try:
        tgrad.set_num_threads(threads)
        for fused in (True, False):
            tgrad.set_fusion(fused)
            assert _cached_logits(model, IDS, [6] + [1] * 6, tgrad.float32).tobytes() == want
            assert model(IDS, logits_dtype=tgrad.float32).numpy()[:, 6:].tobytes() == \
                np.frombuffer(want, np.float32).reshape(2, 12, 96)[:, 6:].tobytes()
    finally:
        tgrad.set_fusion(True)
        tgrad.set_num_threads(before)


@pytest.mark.parametrize("variant", [name for name, ok in tgrad.cpu_isas().items() if ok])
def test_logits_and_tokens_are_the_same_on_every_cpu_variant(model: tgrad.models.CausalLM, variant: str) -> None:
    want = model(IDS, logits_dtype=tgrad.float32).numpy().tobytes(), model.generate(IDS[:, :4], 6).tobytes()
    setting = tgrad._cpu_isa_setting()
    try:
        tgrad.set_cpu_isa(variant)
        got = model(IDS, logits_dtype=tgrad.float32).numpy().tobytes(), model.generate(IDS[:, :4], 6).tobytes()
    finally:
        tgrad.set_cpu_isa(setting)
    assert got == want


def test_a_cache_refuses_another_batch_and_bad_arguments_leave_it_unchanged(model: tgrad.models.CausalLM) -> None:
    cache = model.new_cache()
    model(IDS[:, :5], cache=cache)
    with pytest.raises(errors.ShapeMismatchError, match="batch"):
        model(IDS[:1, 5:6], cache=cache)
    with pytest.raises(errors.InvalidArgumentError, match="logits_to_keep"):
        model(IDS[:, 5:6], cache=cache, logits_to_keep=-1)
    with pytest.raises(errors.DtypeUnsupportedError, match="logits_dtype"):
        model(IDS[:, 5:6], cache=cache, logits_dtype="float16")
    assert cache.length == 5
    want = model(IDS, logits_dtype=tgrad.float32).numpy()[:, 5:]
    assert model(IDS[:, 5:], cache=cache, logits_dtype=tgrad.float32).numpy().tobytes() == want.tobytes()


# ---- generate -------------------------------------------------------------------------------------
def test_greedy_generation_picks_the_argmax_of_a_full_recompute(model: tgrad.models.CausalLM) -> None:
    prompt = IDS[:, :4]
    new, logits = model.generate(prompt, 6, return_logits=True)
    assert new.shape == (2, 6) and new.dtype == np.int64 and logits.shape == (2, 6, 96)
    seq = prompt
    for t in range(6):
        full = model(seq, logits_dtype=tgrad.float32).numpy()[:, -1]
        assert full.tobytes() == logits[:, t].tobytes()
        assert np.array_equal(new[:, t], full.argmax(-1))
        seq = np.concatenate([seq, new[:, t:t + 1]], axis=1)


def test_sampling_replays_with_a_seed(model: tgrad.models.CausalLM) -> None:
    a = model.generate(IDS[:, :3], 8, do_sample=True, seed=11, temperature=2.0)
    assert np.array_equal(a, model.generate(IDS[:, :3], 8, do_sample=True, seed=11, temperature=2.0))
    assert not np.array_equal(a, model.generate(IDS[:, :3], 8, do_sample=True, seed=12, temperature=2.0))
    greedy = model.generate(IDS[:, :3], 8)
    assert np.array_equal(greedy, model.generate(IDS[:, :3], 8, do_sample=True, seed=1, top_k=1))
    assert np.array_equal(greedy, model.generate(IDS[:, :3], 8, do_sample=True, seed=1, top_p=1e-6))


def test_sampling_draws_tokens_at_their_probabilities() -> None:
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], np.float32)).repeat(4000, axis=0)
    gen = tgrad.random.Generator(3)
    picks = tgrad.models.choose(logits, True, generator=gen)
    freq = np.bincount(picks, minlength=4) / len(picks)
    assert np.allclose(freq, [0.5, 0.3, 0.15, 0.05], atol=0.03), freq
    top2 = np.bincount(tgrad.models.choose(logits, True, top_k=2, generator=gen), minlength=4) / len(picks)
    assert top2[2:].sum() == 0 and abs(top2[0] - 0.5 / 0.8) < 0.03, top2
    nucleus = np.bincount(tgrad.models.choose(logits, True, top_p=0.7, generator=gen), minlength=4) / len(picks)
    assert nucleus[2:].sum() == 0 and abs(nucleus[0] - 0.5 / 0.8) < 0.03, nucleus


def test_generation_stops_at_the_eos_token(model: tgrad.models.CausalLM) -> None:
    free = model.generate(IDS[:1, :4], 6)
    eos = int(free[0, 2])
    stopped = model.generate(IDS[:1, :4], 6, eos_token_id=eos)
    assert np.array_equal(stopped[0], free[0, :list(free[0]).index(eos) + 1])


def test_generate_refuses_bad_arguments(model: tgrad.models.CausalLM) -> None:
    for kwargs in ({"temperature": 0.0}, {"top_k": 0}, {"top_p": 1.5}):
        with pytest.raises(errors.InvalidArgumentError):
            model.generate(IDS, 2, do_sample=True, **kwargs)
    with pytest.raises(errors.InvalidArgumentError):
        model.generate(IDS, -1)
    assert model.generate(IDS, 0).shape == (2, 0)


# ---- typed errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, field", [
    ({"architectures": ["GPT2LMHeadModel"]}, "architectures"),
    ({"rope_parameters": {"rope_theta": 1e4, "rope_type": "yarn", "factor": 4.0}}, "rope_type"),
    ({"rope_scaling": {"type": "dynamic", "factor": 2.0}, "rope_parameters": None}, "rope_type"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ({"rope_parameters": {"rope_theta": 1e4, "rope_type": "llama3", "factor": 8.0}}, "low_freq_factor"),
    ({"layer_types": ["full_attention", "chunked_attention"], "architectures": ["Qwen2ForCausalLM"]}, "layer_types"),
], ids=["architecture", "yarn", "dynamic", "gelu", "partial-rope", "llama3-incomplete", "layer-type"])
def test_what_cannot_be_honoured_is_refused_naming_the_field(tmp_path: Path, overrides: dict[str, Any], field: str) -> None:
    doc = config(**overrides)
    (tmp_path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(errors.ModelUnsupportedError, match=field) as info:
        tgrad.models.from_pretrained(tmp_path)
    assert info.value.code == "model_unsupported" and isinstance(info.value, ValueError)


def test_a_missing_tensor_is_named(tmp_path: Path) -> None:
    doc = config()
    w = weights(doc)
    del w["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(errors.TensorNotFoundError, match="model.layers.1.mlp.up_proj.weight"):
        tgrad.models.from_pretrained(write(tmp_path, doc, w))


def test_a_tensor_of_the_wrong_shape_is_named(tmp_path: Path) -> None:
    doc = config()
    w = weights(doc)
    w["model.layers.0.self_attn.k_proj.weight"] = w["model.layers.0.self_attn.q_proj.weight"]
    with pytest.raises(errors.ShapeMismatchError, match=r"k_proj.weight.*\[32, 32\].*\[16, 32\]"):
        tgrad.models.from_pretrained(write(tmp_path, doc, w))


def test_tensors_of_another_variant_are_refused(tmp_path: Path) -> None:
    doc = config()
    w = weights(doc)
    w["model.layers.0.self_attn.q_norm.weight"] = np.ones(8, np.float32)
    with pytest.raises(errors.ModelUnsupportedError, match="q_norm"):
        tgrad.models.from_pretrained(write(tmp_path, doc, w))


def test_a_directory_without_config_or_weights_is_missing_files(tmp_path: Path) -> None:
    with pytest.raises(errors.FileMissingError, match="config.json"):
        tgrad.models.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(config()))
    with pytest.raises(errors.FileMissingError, match="safetensors"):
        tgrad.models.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(errors.FileMalformedError, match="not an object"):
        tgrad.models.from_pretrained(tmp_path)


@pytest.mark.parametrize("bad, error", [
    (np.array([[0, 96]]), errors.IndexOutOfRangeError),
    (np.array([[-1, 2]]), errors.IndexOutOfRangeError),
    (np.array([[0.5, 2.0]]), errors.InvalidArgumentError),
    (np.array([1, 2, 3]), errors.ShapeMismatchError),
    (np.zeros((1, 0), np.int64), errors.ShapeMismatchError),
], ids=["past-vocab", "negative", "float", "1-d", "empty"])
def test_bad_ids_are_refused(model: tgrad.models.CausalLM, bad: np.ndarray, error: type[Exception]) -> None:
    with pytest.raises(error):
        model(bad)
