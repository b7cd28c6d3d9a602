"""A model's projections held as 32-column panels (tgrad.nn.PackedLinear), one decoder layer at a
time: CausalLM.pack_weights on a built model, or from_pretrained(pack_weights=True) as each layer
is read, so that only one layer's [out, in] weights are ever held beside the panels.

q, k and v become one layer, `qkv_proj`, and gate and up one, `gate_up_proj` (PackedLinear.fused:
one product where there were several, each output its own layer's bytes), where all of them pack;
o, down and lm_head (unless tied to the embedding) pack alone. A layer whose out_features is not a
multiple of 32 stays as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import nn, release_cached

if TYPE_CHECKING:
    from .llama import CausalLM, DecoderLayer

__all__ = ["pack_head", "pack_layer", "packed"]


def pack_layer(layer: DecoderLayer) -> None:
    """One decoder layer's projections as panels, each [out, in] weight dropped once its panels
    are made, and its storage given back to the system at once (not kept in tgrad's cache), so
    that at most one group's old and new copies are held together."""
    _fuse(layer.self_attn, ("q_proj", "k_proj", "v_proj"), "qkv_proj")
    release_cached()
    _fuse(layer.mlp, ("gate_proj", "up_proj"), "gate_up_proj")
    release_cached()
    for owner, names in ((layer.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
                         (layer.mlp, ("gate_proj", "up_proj", "down_proj"))):
        for name in names:
            _pack(owner, name)
            release_cached()


def pack_head(model: CausalLM) -> None:
    """lm_head as panels, unless it is tied to the embedding (then it stays the embedding's
    matrix, read as [vocab, hidden])."""
    if not model.config.tie_word_embeddings:
        _pack(model, "lm_head")
        release_cached()


def packed(layer: nn.Linear) -> nn.Linear | nn.PackedLinear:
    """The PackedLinear of an nn.Linear that packs (its weight copied into panels), else layer."""
    return nn.PackedLinear.from_linear(layer) if nn.PackedLinear.packs(layer) else layer


def _pack(owner: nn.Module, name: str) -> None:
    """owner's layer `name` replaced by its PackedLinear, where it is an nn.Linear that packs."""
    layer = owner._modules.get(name)
    if isinstance(layer, nn.Linear):
        setattr(owner, name, packed(layer))


def _fuse(owner: nn.Module, names: tuple[str, ...], fused: str) -> None:
    """owner's layers `names` (nn.Linear of the same input) as one PackedLinear named `fused`, the
    layers removed, where every one packs and their biases are all present or all absent."""
    layers = [owner._modules.get(n) for n in names]
    if not all(nn.PackedLinear.packs(layer) for layer in layers):
        return
    if len({layer.bias is None for layer in layers}) != 1:  # type: ignore[union-attr]
        return
    setattr(owner, fused, nn.PackedLinear.fused(layers))  # type: ignore[arg-type]
    for n in names:
        delattr(owner, n)
