"""A model's weights packed in 32-column panels (from_pretrained(..., pack_weights=True),
CausalLM.pack_weights): the same logits and tokens as the unpacked model, byte for byte, for
every architecture and config shape the loader reads (biases, tied embeddings, out_features that
are not multiples of 32 and stay unpacked), through prefill, the KV cache, a padded batch and
generation; the panels are the parameters afterwards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tgrad
import tgrad.models
import tgrad.nn as nn
from tgrad import errors
from model_dirs import config, weights, write

IDS = np.array([[5, 17, 3, 90, 41, 7, 64, 2, 33], [1, 2, 3, 4, 5, 6, 7, 8, 9]], np.int32)

CASES = {
    "llama": ("llama", {}),
    "llama_wide_mlp": ("llama", {"intermediate_size": 64}),  # gate and up packed too, as one layer
    "llama_fused": ("llama", {"num_key_value_heads": 4, "intermediate_size": 64}),  # q, k, v as one layer
    "qwen2_bias": ("qwen2", {"intermediate_size": 64, "num_key_value_heads": 4}),  # q, k, v with biases, fused
    "tied": ("llama", {"tie_word_embeddings": True}),  # lm_head is the embedding: not packed
    "mistral": ("mistral", {"sliding_window": 4}),
}


def _pair(tmp_path: Path, case: str) -> tuple[tgrad.models.CausalLM, tgrad.models.CausalLM]:
    kind, overrides = CASES[case]
    doc = config(kind, **overrides)
    path = write(tmp_path / case, doc, weights(doc, 3))
    return tgrad.models.from_pretrained(path), tgrad.models.from_pretrained(path, pack_weights=True)


def _bytes(t: Any) -> bytes:
    a = t.numpy() if hasattr(t, "numpy") else np.asarray(t)
    return a.view(np.uint16).tobytes() if a.dtype.itemsize == 2 and a.dtype.kind == "V" else a.tobytes()


@pytest.mark.parametrize("case", list(CASES))
def test_packed_logits_are_the_unpacked_models_bytes(tmp_path: Path, case: str) -> None:
    plain, packed = _pair(tmp_path, case)
    assert any(isinstance(m, nn.PackedLinear) for m in packed.modules())
    for dtype in (None, tgrad.float32):
        assert _bytes(packed(IDS, logits_dtype=dtype)) == _bytes(plain(IDS, logits_dtype=dtype))
        assert _bytes(packed(IDS[:1, :1], logits_dtype=dtype)) == _bytes(plain(IDS[:1, :1], logits_dtype=dtype))


@pytest.mark.parametrize("case", ["llama_wide_mlp", "llama_fused", "qwen2_bias", "tied"])
def test_packed_decoding_gives_the_unpacked_tokens_and_logits(tmp_path: Path, case: str) -> None:
    plain, packed = _pair(tmp_path, case)
    tokens, logits = plain.generate(IDS[:, :4], 7, return_logits=True)
    ptokens, plogits = packed.generate(IDS[:, :4], 7, return_logits=True)
    assert np.array_equal(tokens, ptokens)
    assert _bytes(logits) == _bytes(plogits)
    mask = np.array([[0, 0, 1, 1], [1, 1, 1, 1]])  # a left-padded batch
    assert np.array_equal(plain.generate(IDS[:, :4], 5, attention_mask=mask),
                          packed.generate(IDS[:, :4], 5, attention_mask=mask))


def test_the_panels_are_the_parameters(tmp_path: Path) -> None:
    plain, packed = _pair(tmp_path, "llama")
    names = dict(packed.named_parameters())
    assert "model.layers.0.self_attn.q_proj.panels" in names
    assert "model.layers.0.self_attn.q_proj.weight" not in names
    assert "model.layers.0.self_attn.k_proj.weight" in names  # 16 out_features: not packed
    assert "lm_head.panels" in names and names["lm_head.panels"].shape == (3, 32, 32)
    q = packed.model.layers[0].self_attn.q_proj
    assert isinstance(q, nn.PackedLinear)
    assert _bytes(q.weight) == _bytes(plain.model.layers[0].self_attn.q_proj.weight)
    assert sum(int(np.prod(p.shape)) for p in packed.parameters()) == sum(int(np.prod(p.shape)) for p in plain.parameters())


def test_layers_of_one_input_fuse_into_one_packed_layer(tmp_path: Path) -> None:
    plain, packed = _pair(tmp_path, "qwen2_bias")
    names = dict(packed.named_parameters())
    attn = "model.layers.1.self_attn."
    assert names[attn + "qkv_proj.panels"].shape == ((32 + 32 + 32) // 32, 32, 32)
    assert names[attn + "qkv_proj.bias"].shape == (96,)
    assert not any(n.startswith(attn + p) for n in names for p in ("q_proj", "k_proj", "v_proj"))
    assert names["model.layers.0.mlp.gate_up_proj.panels"].shape == (4, 32, 32)
    fused = packed.model.layers[1].self_attn.qkv_proj
    x = tgrad.Tensor.from_numpy(np.linspace(-2, 2, 3 * 32, dtype=np.float32).reshape(3, 32)).bfloat16()
    ref = plain.model.layers[1].self_attn
    want = [nn.Linear.forward(getattr(ref, n), x) for n in ("q_proj", "k_proj", "v_proj")]
    got = fused(x)
    for i, w in enumerate(want):
        assert _bytes(got.narrow(-1, 32 * i, 32)) == _bytes(w)


def test_a_bad_pack_weights_argument_is_refused_before_reading(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="pack_weights"):
        tgrad.models.from_pretrained(tmp_path / "nothing here", pack_weights="yes")  # type: ignore[arg-type]


def test_from_pretrained_packs_each_layer_as_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pack_weights=True reads each tensor once, as the model is built, and packs each layer before
    the next is read (an untied lm_head first): tgrad's live bytes never exceed the packed model's
    plus one layer's [out, in] weights and one fused layer's panels, where loading everything first
    would hold all of them twice over. The result is CausalLM.pack_weights()'s, name for name and
    byte for byte."""
    doc = config("llama", num_hidden_layers=4, num_key_value_heads=4, intermediate_size=64)
    path = write(tmp_path / "m", doc, weights(doc, 3))
    reads: list[tuple[str, int, int]] = []  # (name, live bytes after reading it, layers packed by then)
    real, pack_layer = tgrad.safetensors.Checkpoint.__getitem__, tgrad.models.llama.pack_layer
    packed_layers = [0]

    def spy(self: Any, name: str) -> Any:
        tensor = real(self, name)
        reads.append((name, tgrad.live_bytes(), packed_layers[0]))
        return tensor

    def counted(layer: Any) -> None:
        pack_layer(layer)
        packed_layers[0] += 1

    monkeypatch.setattr(tgrad.safetensors.Checkpoint, "__getitem__", spy)
    monkeypatch.setattr(tgrad.models.llama, "pack_layer", counted)
    before = tgrad.live_bytes()
    packed = tgrad.models.from_pretrained(path, pack_weights=True)
    monkeypatch.undo()
    names = [name for name, _, _ in reads]
    assert sorted(names) == sorted(tgrad.models.expected_weights(packed.config))  # each once
    assert names[0] == "lm_head.weight" and names[1] == "model.embed_tokens.weight"
    for name, _, done in reads:  # layer i's tensors are read once layers 0 .. i-1 are packed
        if name.startswith("model.layers."):
            assert done == int(name.split(".")[2]), (name, done)
    model_bytes = tgrad.live_bytes() - before
    shapes = tgrad.models.expected_weights(packed.config)
    layer_bytes = sum(2 * int(np.prod(shapes[n])) for n in names
                      if n.startswith("model.layers.0.") and n.endswith("_proj.weight"))
    assert max(live for _, live, _ in reads) - before <= model_bytes + layer_bytes
    assert isinstance(packed.model.layers[0].self_attn.qkv_proj, nn.PackedLinear)
    later = tgrad.models.from_pretrained(path).pack_weights()
    got, want = dict(packed.named_parameters()), dict(later.named_parameters())
    assert list(got) == list(want)
    assert all(_bytes(got[n]) == _bytes(want[n]) for n in got)
