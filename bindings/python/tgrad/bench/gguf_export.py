"""A Hugging Face Llama directory written as a bf16 GGUF file, for the llama.cpp peer of
``bench --generate`` (llama-cpp-python runs GGUF files only).

The `gguf` package (llama.cpp's own writer, on PyPI) writes the file; llama.cpp's converter
script is not on PyPI, so the layout it expects is set here, from llama.cpp's tensor names:
- 2-D weights stay bf16 (GGML type BF16), the 1-D norm weights become float32 (llama.cpp's CPU
  path wants them so; bf16 to float32 is exact);
- q_proj and k_proj rows are permuted from Hugging Face's rope layout (each head's first half
  rotates with its second half) to llama.cpp's (interleaved pairs), so that llama.cpp computes
  the same function: its logits can be compared with tgrad's, not only timed;
- the vocabulary is a placeholder of `vocab_size` tokens (the bench feeds token ids, never text).

Configurations this writer cannot express (biases, rope scaling, sliding windows, Qwen2) raise
ModelUnsupportedError naming the field; the bench then runs without this peer and says why.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .. import errors

__all__ = ["write_gguf", "rope_rows_to_interleaved"]

_LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
          "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
          "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
_TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def rope_rows_to_interleaved(w: np.ndarray, heads: int) -> np.ndarray:
    """The rows of a q or k projection [heads * head_dim, in], each head's rows reordered from
    (first half, second half) pairs (i, i + head_dim/2) to adjacent pairs (2i, 2i + 1)."""
    rows = w.shape[0]
    half = rows // heads // 2
    out: np.ndarray = w.reshape(heads, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    return out


def _gguf_name(hf: str) -> str:
    stem, kind = hf.rsplit(".", 1)
    if stem in _TOP:
        return f"{_TOP[stem]}.{kind}"
    parts = stem.split(".")  # model.layers.<i>.<module...>
    return f"blk.{parts[2]}.{_LAYER['.'.join(parts[3:])]}.{kind}"


def _check(config: Any) -> None:
    def refuse(field: str, why: str) -> None:
        raise errors.by_code["model_unsupported"](f"{config.path}: {field}: {why} (the GGUF writer of tgrad.bench)")

    if config.architecture not in ("LlamaForCausalLM", "MistralForCausalLM"):
        refuse("architectures", f"{config.architecture} is not written as GGUF here (llama and mistral are)")
    if config.attention_bias or config.qkv_bias or config.mlp_bias:
        refuse("attention_bias", "projection biases are not written")
    if config.rope_type not in ("default", None):
        refuse("rope_scaling", f"rope_type {config.rope_type!r} is not written")
    if any(w is not None for w in config.windows):
        refuse("sliding_window", "sliding windows are not written")


def write_gguf(model_dir: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write `model_dir` (config.json and safetensors, bf16 weights) as the bf16 GGUF file `out`."""
    from .. import safetensors
    from ..models import read_config

    config = read_config(model_dir)
    _check(config)
    # after the checks: a model it cannot write is refused without the (optional) package
    import gguf  # type: ignore[import-not-found, unused-ignore]
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name("tgrad bench model")
    writer.add_vocab_size(config.vocab_size)
    writer.add_context_length(4096)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_freq_base(config.rope_theta)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"<t{i}>" for i in range(config.vocab_size)])
    writer.add_token_scores([0.0] * config.vocab_size)
    writer.add_token_types([gguf.TokenType.NORMAL] * config.vocab_size)
    eos = config.eos_token_id[0] if config.eos_token_id else 2
    writer.add_bos_token_id(1 if config.vocab_size > 1 else 0)
    writer.add_eos_token_id(eos)
    with safetensors.open(model_dir) as ckpt:
        for name in ckpt.keys():
            w = ckpt[name].numpy()
            if w.ndim == 1:  # norm weights: float32 (exact)
                writer.add_tensor(_gguf_name(name), np.ascontiguousarray(w.astype(np.float32)))
                continue
            bits = np.ascontiguousarray(w).view(np.uint16)
            if name.endswith("q_proj.weight"):
                bits = rope_rows_to_interleaved(bits, config.num_attention_heads)
            elif name.endswith("k_proj.weight"):
                bits = rope_rows_to_interleaved(bits, config.num_key_value_heads)
            writer.add_tensor(_gguf_name(name), np.ascontiguousarray(bits), raw_dtype=gguf.GGMLQuantizationType.BF16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(out)
