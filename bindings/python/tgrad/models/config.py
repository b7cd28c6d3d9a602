"""A Hugging Face ``config.json`` read into what tgrad's Llama-family model needs, checked.

Every field the model reads is validated here, before a weight is touched; a field or an
architecture tgrad cannot honour raises ModelUnsupportedError naming it (docs/models.md lists
them). Rope settings are read from transformers 5.x's ``rope_parameters`` and from the older
top-level ``rope_theta`` and ``rope_scaling``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import errors

__all__ = ["ARCHITECTURES", "ModelConfig", "config_from_dict", "read_config", "rope_inv_freq"]

#: Architecture name -> model_type, for the classes tgrad runs.
ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2"}
#: rope_type values tgrad computes ("default" and None: the plain base^(-2i/d) frequencies).
ROPE_TYPES = ("default", "linear", "llama3")


def _unsupported(path: Path, field: str, why: str) -> errors.TgradError:
    return errors.by_code["model_unsupported"](f"{path}: {field}: {why}")


def _malformed(path: Path, why: str) -> errors.TgradError:
    return errors.by_code["file_malformed"](f"{path}: {why}")


@dataclass(frozen=True)
class ModelConfig:
    """The settings of a Llama-family causal LM (Hugging Face names)."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    tie_word_embeddings: bool
    attention_bias: bool  # q, k, v and o projections carry a bias (Llama's attention_bias)
    qkv_bias: bool  # q, k and v carry a bias (Qwen2)
    mlp_bias: bool
    rope_theta: float
    rope_type: str
    rope: dict[str, Any]  # the whole rope parameter block (factor, low_freq_factor, ...)
    windows: tuple[int | None, ...]  # each layer's sliding attention window (None: full causal)
    eos_token_id: tuple[int, ...]
    path: Path


def _int(doc: dict[str, Any], key: str, path: Path, default: Any = None, minimum: int = 1) -> int:
    value = doc.get(key, default)
    if value is None:
        raise _malformed(path, f"config.json lacks {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _malformed(path, f"{key} is {value!r}, expected an integer >= {minimum}")
    return value


def _float(doc: dict[str, Any], key: str, path: Path, default: Any = None) -> float:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise _malformed(path, f"{key} is {value!r}, expected a positive number")
    return float(value)


def _architecture(doc: dict[str, Any], path: Path) -> str:
    names = doc.get("architectures")
    if names is None:
        by_type = {v: k for k, v in ARCHITECTURES.items()}
        if doc.get("model_type") in by_type:
            return by_type[doc["model_type"]]
        raise _unsupported(path, "architectures", f"absent, and model_type {doc.get('model_type')!r} is not one of "
                                                  f"{sorted(by_type)}")
    if not isinstance(names, list) or len(names) != 1 or not isinstance(names[0], str):
        raise _unsupported(path, "architectures", f"{names!r}: expected one of {sorted(ARCHITECTURES)}")
    if names[0] not in ARCHITECTURES:
        raise _unsupported(path, "architectures", f"{names[0]!r} is not one of {sorted(ARCHITECTURES)}")
    return names[0]


def _rope(doc: dict[str, Any], path: Path) -> tuple[float, str, dict[str, Any]]:
    """(rope_theta, rope_type, parameters): transformers 5.x's rope_parameters, else the older
    top-level rope_theta and rope_scaling."""
    params = doc.get("rope_parameters")
    if params is not None:
        if not isinstance(params, dict):
            raise _unsupported(path, "rope_parameters", f"{params!r} is not an object")
        if any(isinstance(v, dict) for v in params.values()):
            raise _unsupported(path, "rope_parameters", "per-layer-type rope parameters are not supported")
        block = dict(params)
        theta = block.get("rope_theta", doc.get("rope_theta", 10000.0))
        where = "rope_parameters"
    else:
        scaling = doc.get("rope_scaling")
        if scaling is not None and not isinstance(scaling, dict):
            raise _unsupported(path, "rope_scaling", f"{scaling!r} is not an object")
        block = dict(scaling or {})
        theta = doc.get("rope_theta", 10000.0)
        where = "rope_scaling"
    rope_type = block.get("rope_type") or block.get("type") or "default"  # "type": transformers before 4.45
    if rope_type not in ROPE_TYPES:
        raise _unsupported(path, f"{where}.rope_type", f"{rope_type!r} is not supported (tgrad computes {ROPE_TYPES})")
    theta = _float({"rope_theta": theta}, "rope_theta", path)
    factor = doc.get("partial_rotary_factor", block.get("partial_rotary_factor", 1.0))
    if factor != 1.0:
        raise _unsupported(path, "partial_rotary_factor", f"{factor!r}: only the full head dimension rotates here")
    if rope_type == "linear":
        _float(block, "factor", path)
    if rope_type == "llama3":
        for key in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            if key not in block:
                raise _unsupported(path, f"{where}.{key}", "rope_type 'llama3' needs it")
            _float(block, key, path)
        if block["high_freq_factor"] == block["low_freq_factor"]:
            raise _unsupported(path, f"{where}.high_freq_factor", "equals low_freq_factor (the smoothing divides by 0)")
    if block.get("attention_factor") not in (None, 1.0):
        raise _unsupported(path, f"{where}.attention_factor", f"{block['attention_factor']!r}: only 1 is supported")
    return theta, str(rope_type), block


def _windows(doc: dict[str, Any], arch: str, layers: int, path: Path) -> tuple[int | None, ...]:
    """Each layer's sliding attention window, or None for full causal attention, as transformers
    reads them: Mistral applies `sliding_window` to every layer whenever it is set; Qwen2 only
    with `use_sliding_window`, on the layers `layer_types` names "sliding_attention" (without it,
    the layers from `max_window_layers` on); Llama has no window."""
    if arch == "LlamaForCausalLM":
        return (None,) * layers
    window = doc.get("sliding_window")
    if arch == "Qwen2ForCausalLM" and not doc.get("use_sliding_window", False):
        window = None
    if window is not None:
        window = _int(doc, "sliding_window", path)
    if arch == "MistralForCausalLM":
        return (window,) * layers
    kinds = doc.get("layer_types")
    if kinds is None:
        start = doc.get("max_window_layers", 28)
        kinds = ["sliding_attention" if window is not None and i >= start else "full_attention" for i in range(layers)]
    if not isinstance(kinds, list) or len(kinds) != layers:
        raise _malformed(path, f"layer_types {kinds!r} does not name each of the {layers} layers")
    for kind in kinds:
        if kind not in ("full_attention", "sliding_attention"):
            raise _unsupported(path, "layer_types", f"{kind!r} is not supported")
    return tuple(window if kind == "sliding_attention" else None for kind in kinds)


def _eos(doc: dict[str, Any]) -> tuple[int, ...]:
    eos = doc.get("eos_token_id")
    items = eos if isinstance(eos, list) else [] if eos is None else [eos]
    return tuple(int(e) for e in items if isinstance(e, int) and not isinstance(e, bool))


def read_config(path: str | os.PathLike[str]) -> ModelConfig:
    """The ModelConfig of a model directory's config.json (FileMissingError when absent,
    FileMalformedError when it is no JSON object or a size is invalid, ModelUnsupportedError for
    what tgrad cannot honour)."""
    root = Path(path)
    file = root / "config.json"
    try:
        text = file.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        raise errors.by_code["file_missing"](f"{file}: no such file (a model directory holds config.json)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _malformed(file, f"cannot be read: {exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _malformed(file, f"not JSON ({exc.msg} at character {exc.pos})") from None
    return config_from_dict(doc, root)


def config_from_dict(doc: Any, root: str | os.PathLike[str] = ".") -> ModelConfig:
    """The ModelConfig of a parsed config.json (the checks of read_config; errors name
    `root`/config.json)."""
    root = Path(root)
    file = root / "config.json"
    if not isinstance(doc, dict):
        raise _malformed(file, f"a JSON {type(doc).__name__}, not an object")
    arch = _architecture(doc, file)
    act = doc.get("hidden_act", "silu")
    if act != "silu":
        raise _unsupported(file, "hidden_act", f"{act!r}: the Llama MLP here uses silu")
    hidden = _int(doc, "hidden_size", file)
    heads = _int(doc, "num_attention_heads", file)
    kv = _int(doc, "num_key_value_heads", file, default=heads)
    if heads % kv:
        raise _malformed(file, f"num_key_value_heads {kv} does not divide num_attention_heads {heads}")
    head_dim = doc.get("head_dim")
    head_dim = hidden // heads if head_dim is None else _int(doc, "head_dim", file)
    if head_dim % 2:
        raise _malformed(file, f"head_dim {head_dim} is odd (rope rotates pairs)")
    if arch != "LlamaForCausalLM" and doc.get("attention_bias"):
        raise _unsupported(file, "attention_bias", f"{arch} has no attention_bias option")
    if arch != "LlamaForCausalLM" and doc.get("mlp_bias"):
        raise _unsupported(file, "mlp_bias", f"{arch} has no mlp_bias option")
    theta, rope_type, rope = _rope(doc, file)
    layers = _int(doc, "num_hidden_layers", file)
    return ModelConfig(
        architecture=arch, vocab_size=_int(doc, "vocab_size", file), hidden_size=hidden,
        intermediate_size=_int(doc, "intermediate_size", file), num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
        rms_norm_eps=_float(doc, "rms_norm_eps", file, 1e-6), tie_word_embeddings=bool(doc.get("tie_word_embeddings", False)),
        attention_bias=bool(doc.get("attention_bias", False)), qkv_bias=arch == "Qwen2ForCausalLM",
        mlp_bias=bool(doc.get("mlp_bias", False)), rope_theta=theta, rope_type=rope_type, rope=rope,
        windows=_windows(doc, arch, layers, file), eos_token_id=_eos(doc), path=root)


def rope_inv_freq(config: ModelConfig) -> np.ndarray | None:
    """The float32 inverse frequencies [head_dim / 2] a scaled rope rotates by, or None for the
    plain base^(-2i/d), which tgrad.rope computes exactly from the base. The scaled tables follow
    transformers' formulas (linear: divided by factor; llama3: Meta's smoothing between the low
    and high frequency wavelengths), evaluated in float64 and rounded once to float32."""
    if config.rope_type == "default":
        return None
    d = config.head_dim
    inv = 1.0 / config.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    rope = config.rope
    factor = float(rope["factor"])
    if config.rope_type == "linear":
        return (inv / factor).astype(np.float32)
    low, high = float(rope["low_freq_factor"]), float(rope["high_freq_factor"])
    old = float(rope["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, smoothed, scaled).astype(np.float32)
