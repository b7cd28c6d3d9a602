"""The GGUF writer of the model bench's llama.cpp peer (tgrad.bench.gguf_export): llama.cpp must
compute the function the Hugging Face directory defines, so that its logits can be compared with
tgrad's. The rope layout change is checked with tgrad's own rope (core tier); the file itself with
the `gguf` package's reader (interop tier, where gguf is installed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tgrad
import tgrad.models
from tgrad.bench.gguf_export import rope_rows_to_interleaved, write_gguf

from model_dirs import model_dir


def test_permuted_rows_make_rotate_half_rope_the_interleaved_rope() -> None:
    """llama.cpp rotates adjacent feature pairs; Hugging Face's Llama rotates (i, i + d/2). With
    q_proj's rows permuted, each head's interleaved rope is the rotate-half rope of the same
    values, permuted: the same bytes (each output is the same pair rotated by the same angle)."""
    heads, hd, length = 3, 8, 5
    rng = np.random.default_rng(7)
    q = rng.standard_normal((length, heads * hd)).astype(np.float32)  # a projection's output rows
    permuted = rope_rows_to_interleaved(q.T, heads).T  # what q = x @ W.T gives with W's rows permuted
    positions = np.arange(3, 3 + length, dtype=np.int32)

    def rope(values: np.ndarray, interleaved: bool) -> np.ndarray:
        t = tgrad.Tensor.from_numpy(values.reshape(length, heads, hd).transpose(1, 0, 2).copy())
        out = tgrad.rope(t, positions, 10000.0, interleaved=interleaved).numpy(np.float32)
        result: np.ndarray = out.transpose(1, 0, 2).reshape(length, heads * hd)
        return result

    hf = rope(q, interleaved=False)
    assert np.array_equal(rope_rows_to_interleaved(hf.T, heads).T, rope(permuted, interleaved=True))
    assert not np.array_equal(permuted, q)  # the permutation is not the identity


def test_the_permutation_moves_each_heads_second_half_between_its_first() -> None:
    w = np.arange(8)[:, None] * np.ones((1, 2))  # one head of 8 rows
    assert rope_rows_to_interleaved(w, 1)[:, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    two = rope_rows_to_interleaved(np.arange(8)[:, None], 2)[:, 0].tolist()  # two heads of 4
    assert two == [0, 2, 1, 3, 4, 6, 5, 7]


def test_models_the_writer_cannot_express_are_refused_naming_the_field(tmp_path: Path) -> None:
    path = model_dir(tmp_path / "qwen", "qwen2")
    with pytest.raises(tgrad.errors.ModelUnsupportedError, match="architectures"):
        write_gguf(path, tmp_path / "x.gguf")
    scaled = model_dir(tmp_path / "scaled", rope_parameters={"rope_theta": 10000.0, "rope_type": "linear", "factor": 2.0})
    with pytest.raises(tgrad.errors.ModelUnsupportedError, match="rope_scaling"):
        write_gguf(scaled, tmp_path / "y.gguf")
    assert not (tmp_path / "x.gguf").exists() and not (tmp_path / "y.gguf").exists()


@pytest.mark.interop
def test_the_gguf_file_holds_every_weight_in_llama_cpps_layout(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    path = model_dir(tmp_path / "llama", num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    out = write_gguf(path, tmp_path / "m.gguf")
    reader = gguf.GGUFReader(str(out))
    tensors = {t.name: t for t in reader.tensors}
    with tgrad.safetensors.open(path) as ckpt:
        hf = {name: ckpt[name].numpy(np.float32) for name in ckpt.keys()}
    assert len(tensors) == len(hf)
    assert str(reader.fields["general.architecture"].contents()) == "llama"
    assert int(reader.fields["llama.attention.head_count_kv"].contents()) == 2

    def bf16(name: str) -> np.ndarray:
        t = tensors[name]
        assert t.tensor_type == gguf.GGMLQuantizationType.BF16
        bits = np.asarray(t.data).view(np.uint16).reshape(-1).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(hf_shape(name))

    def hf_shape(name: str) -> tuple[int, ...]:
        return tuple(int(n) for n in reversed(tensors[name].shape))  # GGUF lists the fastest axis first

    assert np.array_equal(bf16("token_embd.weight"), hf["model.embed_tokens.weight"])
    assert np.array_equal(bf16("blk.1.ffn_down.weight"), hf["model.layers.1.mlp.down_proj.weight"])
    assert np.array_equal(bf16("blk.0.attn_q.weight"), rope_rows_to_interleaved(hf["model.layers.0.self_attn.q_proj.weight"], 4))
    assert np.array_equal(bf16("blk.0.attn_k.weight"), rope_rows_to_interleaved(hf["model.layers.0.self_attn.k_proj.weight"], 2))
    assert np.array_equal(bf16("blk.0.attn_v.weight"), hf["model.layers.0.self_attn.v_proj.weight"])
    norm = tensors["blk.0.attn_norm.weight"]
    assert norm.tensor_type == gguf.GGMLQuantizationType.F32
    assert np.array_equal(np.asarray(norm.data), hf["model.layers.0.input_layernorm.weight"])
