"""Tiny Hugging Face model directories written by hand (config.json + safetensors), without
transformers: seeded random bf16 weights named and shaped as transformers saves them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

import tgrad
import tgrad.models
import tgrad.safetensors
from tgrad._ffi import ffi, lib

ARCH = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}


def config(kind: str = "llama", **overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "architectures": [ARCH[kind]], "model_type": kind, "vocab_size": 96, "hidden_size": 32,
        "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 8, "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "eos_token_id": None,
    }
    if kind == "mistral":
        doc["sliding_window"] = None
    doc.update(overrides)
    return doc


def weights(doc: dict[str, Any], seed: int = 0, scale: float = 0.25) -> dict[str, np.ndarray]:
    """float32 weights of the shapes tgrad.models.expected_weights names (already bf16 values)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, shape in tgrad.models.expected_weights(tgrad.models.config_from_dict(doc)).items():
        if name.endswith("norm.weight"):
            value = 1 + 0.25 * rng.standard_normal(shape)
        elif name.endswith("embed_tokens.weight"):
            value = rng.standard_normal(shape)
        else:
            value = scale * rng.standard_normal(shape)
        out[name] = value.astype(ml_dtypes.bfloat16).astype(np.float32)
    return out


def write(path: Path, doc: dict[str, Any], tensors: dict[str, np.ndarray], *, dtype: Any = ml_dtypes.bfloat16,
          shards: int = 1) -> Path:
    """config.json and the tensors as safetensors (`shards` > 1: split, with an index)."""
    from safetensors.numpy import save_file

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(doc))
    arrays = {name: np.ascontiguousarray(value.astype(dtype)) for name, value in tensors.items()}
    if shards == 1:
        save_file(arrays, str(path / "model.safetensors"))
        return path
    names = list(arrays)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = names[s::shards]
        save_file({n: arrays[n] for n in part}, str(path / file))
        weight_map.update({n: file for n in part})
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return path


def model_dir(path: Path, kind: str = "llama", seed: int = 0, **overrides: Any) -> Path:
    doc = config(kind, **overrides)
    return write(path, doc, weights(doc, seed))


def reference_logits(doc: dict[str, Any], w: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
    """The model's mathematics in float64, nothing rounded: logits [B, L, vocab]."""
    cfg = tgrad.models.config_from_dict(doc)
    scaled = tgrad.models.rope_inv_freq(cfg)
    hd, heads, kv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    inv = (cfg.rope_theta ** (-np.arange(0, hd, 2) / hd) if scaled is None else scaled.astype(np.float64))
    f = {n: v.astype(np.float64) for n, v in w.items()}
    b, length = ids.shape
    pos = np.arange(length)

    def rms(v: np.ndarray, g: np.ndarray) -> np.ndarray:
        return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + cfg.rms_norm_eps) * g

    def lin(v: np.ndarray, name: str) -> np.ndarray:
        out = v @ f[name + ".weight"].T
        return out + f[name + ".bias"] if name + ".bias" in f else out

    def rope(t: np.ndarray) -> np.ndarray:
        ang = pos[:, None] * inv[None, :]
        cos, sin = np.cos(ang), np.sin(ang)
        a, c = t[..., :hd // 2], t[..., hd // 2:]
        return np.concatenate([a * cos - c * sin, c * cos + a * sin], axis=-1)

    x = f["model.embed_tokens.weight"][ids]
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        h = rms(x, f[p + "input_layernorm.weight"])
        q = lin(h, p + "self_attn.q_proj").reshape(b, length, heads, hd).transpose(0, 2, 1, 3)
        k = lin(h, p + "self_attn.k_proj").reshape(b, length, kv, hd).transpose(0, 2, 1, 3)
        v = lin(h, p + "self_attn.v_proj").reshape(b, length, kv, hd).transpose(0, 2, 1, 3)
        q, k = rope(q), rope(k)
        k, v = np.repeat(k, heads // kv, axis=1), np.repeat(v, heads // kv, axis=1)
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
        visible = pos[None, :] <= pos[:, None]
        if cfg.windows[i] is not None:
            visible &= pos[:, None] - pos[None, :] < cfg.windows[i]
        s = np.where(visible, s, -np.inf)
        e = np.exp(s - s.max(-1, keepdims=True))
        y = (e / e.sum(-1, keepdims=True) @ v).transpose(0, 2, 1, 3).reshape(b, length, heads * hd)
        x = x + lin(y, p + "self_attn.o_proj")
        h = rms(x, f[p + "post_attention_layernorm.weight"])
        g = lin(h, p + "mlp.gate_proj")
        x = x + lin(g / (1 + np.exp(-g)) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms(x, f["model.norm.weight"])
    head = f["model.embed_tokens.weight"] if cfg.tie_word_embeddings else f["lm_head.weight"]
    return x @ head.T


def in_memory(doc: dict[str, Any], seed: int = 0) -> tgrad.models.CausalLM:
    """The model of `doc` built from its seeded weights without a directory (for rendering its steps)."""
    cfg = tgrad.models.config_from_dict(doc)
    w = {n: tgrad.Tensor.from_numpy(v, dtype=tgrad.bfloat16) for n, v in weights(doc, seed).items()}
    return tgrad.models.CausalLM(cfg, w, tgrad.models.rope_inv_freq(cfg))


def forward_steps(model: tgrad.models.CausalLM) -> list[tuple[tgrad.Tensor, int]]:
    """(pending tensor, step) for every step of a forward with float32 logits and of a prompt's
    forward into a KV cache (slice_scatter's writes included), on the CPU (nothing realized)."""
    ids = np.array([[1, 5, 7, 9, 2]])
    out = []
    for y in (model(ids, logits_dtype=tgrad.float32), model(ids[:, :4], cache=model.new_cache(8))):
        out += [(y, i) for i in range(len(tgrad.explain(y, json=True)["steps"]))]
    return out


def storage_address(t: tgrad.Tensor | None) -> int:
    """Where t's storage starts: the same address before and after a write means the write took
    the buffer in place (a KV cache's slice_scatter)."""
    assert t is not None
    data = ffi.new("const uint16_t **")
    assert lib.tgrad_tensor_data(t._h, data) == 0
    return int(ffi.cast("uintptr_t", data[0]))
