"""torch.nn.functional's names and signatures, for the ops tgrad has: a forward pass written
with ``import torch.nn.functional as F`` runs on tgrad with ``import tgrad.nn.functional as F``.

    h = F.silu(F.linear(x, w_gate)) * F.linear(x, w_up)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

Each function is a spelling of tgrad ops (lazy, every op's value correctly rounded as
docs/numerics.md says); nothing is computed here. Arguments that exist in torch only for training
(`inplace`, gradient options) are accepted where they change nothing in a forward pass; those that
would (`inplace=True`, `dropout_p > 0`, `max_norm`) raise InvalidArgumentError. The ops of other
modules (tgrad.softmax, tgrad.norms, tgrad.shape_ops, tgrad.where) are looked up at call time: in a
build without one, the function that needs it raises AttributeError naming it.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _bf16, errors, ops
from ..tensor import Tensor
from ._borrow import borrowed

__all__ = [
    "dropout", "embedding", "gelu", "layer_norm", "linear", "log_softmax", "relu", "rms_norm",
    "scaled_dot_product_attention", "sigmoid", "silu", "softmax", "tanh",
]


def _tensor(value: Any, what: str, user: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise errors.InvalidArgumentError(f"{user}: {what} must be a tgrad.Tensor, got {type(value).__name__}")
    return value


def _not_inplace(inplace: Any, user: str) -> None:
    if inplace:
        raise errors.InvalidArgumentError(f"{user}: inplace=True is not supported (tgrad ops make new tensors)")


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


# ---- activations ------------------------------------------------------------------------------------
def relu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002 - torch's name
    """max(x, 0)."""
    _not_inplace(inplace, "relu")
    return ops.relu(_tensor(input, "input", "relu"))


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    """x·Φ(x); approximate="tanh": the tanh form."""
    return ops.gelu(_tensor(input, "input", "gelu"), approximate=approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """x·sigmoid(x)."""
    _not_inplace(inplace, "silu")
    return ops.silu(_tensor(input, "input", "silu"))


def sigmoid(input: Tensor) -> Tensor:  # noqa: A002
    return ops.sigmoid(_tensor(input, "input", "sigmoid"))


def tanh(input: Tensor) -> Tensor:  # noqa: A002
    return ops.tanh(_tensor(input, "input", "tanh"))


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """The input itself when not training or p == 0 (what an inference pass asks for); anything
    else raises InvalidArgumentError: tgrad has no training."""
    _not_inplace(inplace, "dropout")
    x = _tensor(input, "input", "dropout")
    if training and p != 0:
        raise errors.InvalidArgumentError(
            f"dropout: p={p!r} with training=True is not supported (tgrad has no training); "
            "pass training=False (module.eval()) or p=0")
    return x


# ---- linear -----------------------------------------------------------------------------------------
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002
    """input @ weight.T + bias with weight [out, in] and bias [out] (or None), for input
    [..., in] -> [..., out]: the product (reading weight.T as a view) rounded to bf16, then the sum,
    the bytes tgrad.nn.Linear gives. Leading axes are rows of one 2-D product."""
    x = _tensor(input, "input", "linear")
    w = _tensor(weight, "weight", "linear")
    if w.ndim != 2:
        raise errors.ShapeMismatchError(f"linear: weight is {_shape_text(w.shape)}, expected 2-D [out_features, in_features]")
    out_f, in_f = w.shape
    if bias is not None and _tensor(bias, "bias", "linear").shape != (out_f,):
        raise errors.ShapeMismatchError(f"linear: bias is {_shape_text(bias.shape)}, expected [{out_f}] (weight is "
                                        f"{_shape_text(w.shape)})")
    shape = x.shape
    if not shape or shape[-1] != in_f:
        raise errors.ShapeMismatchError(
            f"linear: input is {_shape_text(shape)}, expected [..., {in_f}] (weight is {_shape_text(w.shape)})")
    rows = x if len(shape) == 2 else x.reshape(math.prod(shape[:-1]), in_f)
    y = rows @ w.T
    if bias is not None:
        y = y + bias
    return y if len(shape) == 2 else y.reshape(*shape[:-1], out_f)


# ---- ops of other modules ---------------------------------------------------------------------------
def _dim(dim: Any, user: str) -> Any:
    if dim is None:
        raise errors.InvalidArgumentError(
            f"{user}: give dim (torch's implicit choice of a dim is deprecated, and tgrad does not guess)")
    return dim


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:  # noqa: A002
    """exp(x - max) / sum along `dim`, correctly rounded (tgrad.softmax)."""
    x, dim = _tensor(input, "input", "softmax"), _dim(dim, "softmax")
    return borrowed("softmax", "softmax")(x, dim=dim, dtype=dtype)  # type: ignore[no-any-return]


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:  # noqa: A002
    """x - logsumexp along `dim`, correctly rounded (tgrad.log_softmax)."""
    x, dim = _tensor(input, "input", "log_softmax"), _dim(dim, "log_softmax")
    return borrowed("softmax", "log_softmax")(x, dim=dim, dtype=dtype)  # type: ignore[no-any-return]


def rms_norm(input: Tensor, normalized_shape: Sequence[int] | int, weight: Tensor | None = None,  # noqa: A002
             eps: float | None = None) -> Tensor:
    """x * weight / sqrt(mean(x^2) + eps) over the last len(normalized_shape) axes, correctly
    rounded (tgrad.rms_norm)."""
    fn = borrowed("norms", "rms_norm")
    return fn(_tensor(input, "input", "rms_norm"), normalized_shape, weight=weight, eps=eps)  # type: ignore[no-any-return]


def layer_norm(input: Tensor, normalized_shape: Sequence[int] | int, weight: Tensor | None = None,  # noqa: A002
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last len(normalized_shape) axes,
    correctly rounded (tgrad.layer_norm)."""
    fn = borrowed("norms", "layer_norm")
    return fn(_tensor(input, "input", "layer_norm"), normalized_shape, weight=weight, bias=bias,  # type: ignore[no-any-return]
              eps=eps)


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None,  # noqa: A002
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """The rows of weight [num_embeddings, dim] at the integer indices `input` (any shape):
    [*input.shape, dim], tgrad.take(weight, input, axis=0). padding_idx, scale_grad_by_freq
    and sparse only shape gradients in torch and change nothing here; max_norm (which rewrites
    the weight) raises InvalidArgumentError."""
    w = _tensor(weight, "weight", "embedding")
    if w.ndim != 2:
        raise errors.ShapeMismatchError(f"embedding: weight is {_shape_text(w.shape)}, expected 2-D [num_embeddings, dim]")
    if max_norm is not None:
        raise errors.InvalidArgumentError("embedding: max_norm is not supported (it rewrites the weight in place)")
    if padding_idx is not None and not -w.shape[0] <= int(padding_idx) < w.shape[0]:
        raise errors.IndexOutOfRangeError(
            f"embedding: padding_idx {padding_idx} is outside the {w.shape[0]} embeddings")
    take = borrowed("shape_ops", "take")
    return take(w, input, axis=0)  # type: ignore[no-any-return]


# ---- attention --------------------------------------------------------------------------------------
def _grouped(t: Tensor, kv_heads: int) -> Tensor:
    """t [..., H, L, E] as [..., H_kv, H / H_kv, L, E]: query head h is group h // (H / H_kv),
    member h % (H / H_kv) (torch's repeat_interleave of the kv heads on dim -3). A view of a
    contiguous t; nothing is copied for the key and value, which get a size-1 axis instead and
    are broadcast by the batched matmul (no repeated copy of a kv head is ever made)."""
    *lead, h, length, e = t.shape
    return t.reshape(*lead, kv_heads, h // kv_heads, length, e)


def _grouped_mask(mask: Tensor, heads: int, kv_heads: int) -> Tensor:
    """A mask broadcastable to [..., H, L, S], made broadcastable to [..., H_kv, G, L, S]."""
    if mask.ndim < 3:
        return mask  # [L, S] or [S]: broadcast from the right as before
    *lead, h, length, s = mask.shape
    if h == 1:
        return mask.reshape(*lead, 1, 1, length, s)
    if h != heads:
        raise errors.ShapeMismatchError(
            f"scaled_dot_product_attention: attn_mask is {_shape_text(mask.shape)}, whose heads axis (-3) is "
            f"neither 1 nor the query's {heads}")
    return mask.reshape(*lead, kv_heads, h // kv_heads, length, s)


@functools.lru_cache(maxsize=8)
def _causal_host(length: int, sources: int, bf16: bool) -> np.ndarray:
    """0 on and below the diagonal, -inf above it ([L, S], torch's tril(ones(L, S)), top-left
    aligned), built on the host once per (L, S) and kept read-only: bf16 (exact: 0 and -inf)
    when the scores are, else float32. A host array, not a tensor, so that no tensor outlives
    its call; uploading it is a copy (about 0.03 ms for [512, 512], against 2 ms to build it)."""
    bias = np.triu(np.full((length, sources), -np.inf, np.float32), k=1)
    if bf16:
        bias = bias.astype(_bf16.dtype())
    bias.flags.writeable = False
    return bias


def _causal_bias(length: int, sources: int, device: str, dtype: Any) -> Tensor:
    bf16 = str(dtype) == "bfloat16"
    return Tensor.from_numpy(_causal_host(length, sources, bf16), device=device, dtype=None if bf16 else dtype)


def _toplevel(name: str, user: str) -> Any:
    """tgrad.<name>, imported when first called (tgrad imports this module)."""
    return getattr(importlib.import_module("tgrad"), name)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(query @ key.mT * scale + mask) @ value for query [..., L, E], key [..., S, E],
    value [..., S, Ev] -> [..., L, Ev], as a composition of tgrad ops with these rounding points
    (docs/nn.md): the product query @ key.mT rounded to bf16; times `scale` (default
    1/sqrt(E), a Python float, which tgrad rounds to the scores' dtype as it does every number
    operand: torch multiplies by it in float32 instead, see docs/nn.md), rounded; the mask:
    is_causal adds 0 on and below the diagonal and -inf above it (torch's top-left alignment,
    built once per (L, S) and cached), a bool attn_mask keeps the scores where it is True and
    puts -inf elsewhere (tgrad.where), a float attn_mask is added (rounded); the correctly
    rounded softmax over the last axis; the product with value, rounded to bf16.

    enable_gqa: key and value have H_kv heads (axis -3) dividing the query's H_q, and query head
    h attends to key/value head h // (H_q / H_kv). The query is viewed as [..., H_kv, G, L, E]
    and each kv head broadcast over its group of G by the batched matmul: no copy of a kv head.
    dropout_p other than 0, or attn_mask with is_causal, raises InvalidArgumentError (as torch
    refuses the latter)."""
    user = "scaled_dot_product_attention"
    q, k, v = (_tensor(t, name, user) for t, name in ((query, "query"), (key, "key"), (value, "value")))
    if dropout_p != 0:
        raise errors.InvalidArgumentError(f"{user}: dropout_p={dropout_p!r} is not supported (tgrad has no training)")
    if is_causal and attn_mask is not None:
        raise errors.InvalidArgumentError(f"{user}: give attn_mask or is_causal=True, not both (as torch)")
    for t, name in ((q, "query"), (k, "key"), (v, "value")):
        if t.ndim < (3 if enable_gqa else 2):
            raise errors.RankMismatchError(f"{user}: {name} is {_shape_text(t.shape)}, expected [..., "
                                           f"{'heads, ' if enable_gqa else ''}length, features]")
    mask = None if attn_mask is None else _tensor(attn_mask, "attn_mask", user)
    (length, features), sources = q.shape[-2:], k.shape[-2]
    if k.shape[-1] != features:
        raise errors.ShapeMismatchError(
            f"{user}: key is {_shape_text(k.shape)}, expected [..., S, {features}] (the query's features)")
    if v.shape[-2] != sources:
        raise errors.ShapeMismatchError(
            f"{user}: value is {_shape_text(v.shape)}, expected [..., {sources}, Ev] (the key's length)")
    if scale is None:
        if features == 0:
            raise errors.ShapeMismatchError(f"{user}: the default scale 1/sqrt(E) needs E > 0; give scale=")
        scale = 1.0 / math.sqrt(features)
    if enable_gqa and (k.shape[-3] == 0 or k.shape[-3] != v.shape[-3] or q.shape[-3] % k.shape[-3]):
        raise errors.ShapeMismatchError(
            f"{user}: enable_gqa needs the key's and value's heads (axis -3: {k.shape[-3]}, {v.shape[-3]}) to be "
            f"equal and to divide the query's ({q.shape[-3]})")
    soft = borrowed("softmax", "softmax")
    where = _toplevel("where", "F.scaled_dot_product_attention with a bool mask") \
        if mask is not None and str(mask.dtype) == "bool" else None
    heads = q.shape[-3] if enable_gqa else 0
    if enable_gqa and k.shape[-3] != heads:  # group the query heads; the kv heads broadcast (views)
        kv_heads = k.shape[-3]
        q, k, v = _grouped(q, kv_heads), _grouped(k, kv_heads), _grouped(v, kv_heads)
        if mask is not None:
            mask = _grouped_mask(mask, heads, kv_heads)
    else:
        heads = 0
    scores = (q @ k.mT) * float(scale)
    if is_causal:
        scores = scores + _causal_bias(length, sources, scores.device, scores.dtype)
    if mask is not None:
        if where is not None:
            minus_inf = Tensor.from_numpy(np.array(-np.inf, np.float32), device=scores.device, dtype=scores.dtype)
            scores = where(mask, scores, minus_inf)
        else:
            scores = scores + mask
    out = soft(scores, dim=-1) @ v
    if heads:
        *lead, _, _, out_length, ev = out.shape
        out = out.reshape(*lead, heads, out_length, ev)
    return out  # type: ignore[no-any-return]


# ---- losses (hgoptim: tgrad.nn.losses, float32, docs/nn.md "Losses") -----------------------------------
from .losses import cross_entropy, mse_loss  # noqa: E402

__all__ += ["cross_entropy", "mse_loss"]
