"""from_pretrained: a Hugging Face model directory (config.json and safetensors) read into a CausalLM.

The config is read and checked first, then every weight's name and shape against the
checkpoint's schema, all before one tensor is read; then the tensors are read, each file opened
once (tgrad.safetensors). bf16 weights come in bit for bit; float32, float16 and float64 ones only
with convert=True (each rounded once to bf16 as it is read, one tensor at a time).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from .. import errors, safetensors
from ..tensor import Tensor, _device_number, _ready
from .config import ModelConfig, read_config, rope_inv_freq
from .llama import CausalLM

__all__ = ["expected_weights", "from_pretrained"]

#: Names a checkpoint may hold that the model does not read: older Llama checkpoints saved the
#: rope table, which tgrad computes itself.
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


def expected_weights(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor name the model reads, with its shape."""
    c = config
    d, q_out, kv_out = c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c.vocab_size, d)}
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (d,)
        out[p + "post_attention_layernorm.weight"] = (d,)
        for name, rows, cols in (("q_proj", q_out, d), ("k_proj", kv_out, d), ("v_proj", kv_out, d), ("o_proj", d, q_out)):
            out[f"{p}self_attn.{name}.weight"] = (rows, cols)
            if c.attention_bias or (c.qkv_bias and name != "o_proj"):
                out[f"{p}self_attn.{name}.bias"] = (rows,)
        for name, rows, cols in (("gate_proj", c.intermediate_size, d), ("up_proj", c.intermediate_size, d),
                                 ("down_proj", d, c.intermediate_size)):
            out[f"{p}mlp.{name}.weight"] = (rows, cols)
            if c.mlp_bias:
                out[f"{p}mlp.{name}.bias"] = (rows,)
    out["model.norm.weight"] = (d,)
    if not c.tie_word_embeddings:
        out["lm_head.weight"] = (c.vocab_size, d)
    return out


def _check_schema(ckpt: safetensors.Checkpoint, config: ModelConfig, wanted: dict[str, tuple[int, ...]]) -> None:
    for name, shape in wanted.items():
        if name not in ckpt.schema:
            raise errors.TensorNotFoundError(f"{ckpt.path}: no tensor named {name!r} ({config.architecture} needs it)")
        got = ckpt.schema[name].shape
        if got != shape:
            raise errors.ShapeMismatchError(
                f"{ckpt.path}: tensor {name!r} is {list(got)}, config.json implies {list(shape)}")
    spare = [n for n in ckpt.schema if n not in wanted and not n.endswith(_IGNORED_SUFFIXES)
             and not (n == "lm_head.weight" and config.tie_word_embeddings)]
    if spare:
        more = f" and {len(spare) - 3} more" if len(spare) > 3 else ""
        raise errors.by_code["model_unsupported"](
            f"{ckpt.path}: tensors {spare[:3]}{more} are not part of {config.architecture} as config.json describes it "
            "(an architecture variant tgrad does not run)")


class _Reader(Mapping[str, Tensor]):
    """The checkpoint's tensors `names`, each read (and moved to `device`, its host copy dropped)
    when the model asks for it, and not kept here: the model holds each weight alone, so a layer
    packed as it is built (pack_weights) drops its [out, in] weights before the next layer is
    read. A name asked for twice would be read twice: InternalError instead."""

    def __init__(self, ckpt: safetensors.Checkpoint, names: list[str], device: str) -> None:
        self._ckpt, self._names, self._device = ckpt, dict.fromkeys(names), device
        self._read: set[str] = set()

    def __getitem__(self, name: str) -> Tensor:
        if name not in self._names:
            raise KeyError(name)
        if name in self._read:
            raise errors.by_code["internal"](f"from_pretrained: {name!r} asked for twice")
        self._read.add(name)
        tensor = self._ckpt[name]
        return tensor if self._device == "cpu" else tensor.to(self._device)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def from_pretrained(path: str | os.PathLike[str], *, convert: bool = False, logits_dtype: Any = None,
                    device: str = "cpu", pack_weights: bool = False) -> CausalLM:
    """The causal LM of a Hugging Face model directory: config.json, and model.safetensors or
    shards with their model.safetensors.index.json. Architectures: LlamaForCausalLM,
    MistralForCausalLM, Qwen2ForCausalLM (docs/models.md). logits_dtype: tgrad.bfloat16
    (default) or tgrad.float32 for `model(ids)`. device: where the model runs ("cpu", "opencl",
    "cuda", "metal"): each weight is moved there once as it is read, and every forward runs
    there (its KV cache too), its logits handed back as CPU Tensors with the CPU's bytes.
    pack_weights: hold the projections' weights as 32-column panels for inference
    (CausalLM.pack_weights): the same logits, faster decoding; the parameters are then the panels.

    Raises FileMissingError (no config.json or no weights), FileMalformedError (a config or
    checkpoint that is not well formed), ModelUnsupportedError (an architecture or config field
    tgrad cannot honour, or weights of another variant), TensorNotFoundError (a weight missing),
    ShapeMismatchError (a weight whose shape is not the config's), DtypeConversionRefusedError
    (float32 weights without convert=True), InvalidArgumentError (a device name tgrad does not
    know, or pack_weights not a bool) or BackendUnavailableError (a device this machine cannot use), these two before
    anything is read."""
    _ready(_device_number(device))
    if not isinstance(pack_weights, bool):
        raise errors.InvalidArgumentError(f"from_pretrained: pack_weights must be True or False, got {pack_weights!r}")
    config = read_config(path)
    inv_freq = rope_inv_freq(config)
    with safetensors.open(path, convert=convert) as ckpt:
        wanted = expected_weights(config)
        _check_schema(ckpt, config, wanted)
        # each tensor read as the model is built (one layer at a time), packed with its layer
        return CausalLM(config, _Reader(ckpt, list(wanted), device), inv_freq, logits_dtype, pack_weights=pack_weights)
