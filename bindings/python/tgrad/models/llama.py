"""The Llama-family causal LM (Llama, Mistral, Qwen2) written with tgrad.nn, Hugging Face names.

    model = tgrad.models.from_pretrained("my-llama/")
    logits = model(ids)                                  # [B, L, vocab] bf16
    cache = model.new_cache(); model(prompt, cache=cache); model(next_ids, cache=cache)

Every value is a tgrad op's correctly rounded result (docs/models.md lists the rounding points).
A KVCache holds each layer's keys (after rope) and values; a forward with a cache appends the new
positions and attends over all of them, giving the bytes a forward over the whole prefix gives
at those positions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, cast

import numpy as np

from .. import errors, nn
from ..dtypes import bfloat16, float32, int32
from ..nn import functional as F
from ..norms import rope
from ..creation import zeros
from ..shape_ops import slice_scatter
from ..softmax import softmax
from ..tensor import Tensor
from .config import ModelConfig
from .packing import pack_head, pack_layer, packed
from .padding import Plan, additive_mask, check_mask, plan

__all__ = ["Attention", "CausalLM", "DecoderLayer", "KVCache", "MLP", "Model", "StepInputs", "attend", "linear"]


class StepInputs:
    """A one-token decode step's position as data (tgrad.models.step): `at`, an int32 Tensor of
    one element, is both the slot the new keys and values are written at (slice_scatter reads it
    when the step runs) and the rope position; `seen` the cached positions attention reads (the
    written length rounded up to a multiple of 32, at most the capacity); `masks` each window's
    additive mask over them (-inf past the written length). So the step's graph has the same
    shapes for 32 steps and a captured program makes it again from these inputs alone."""

    def __init__(self, at: Tensor, seen: int, masks: dict[int | None, Tensor]) -> None:
        self.at, self.seen, self.masks = at, seen, masks


class KVCache:
    """Each layer's keys (rope applied) and values of positions 0 .. length-1, held in
    preallocated buffers [B, H_kv, capacity, head_dim] written in place: a step writes its new
    positions with tgrad.slice_scatter into the layer's buffer and attends over the view
    [:, :, :length] (no copy). slice_scatter is lazy and immutable like every op; it writes in
    place because the cache drops its own reference to the old buffer first, so the step that
    runs the write holds the buffer's only reference and takes its storage (docs/models.md).
    A reader of an earlier state (a view someone kept) holds a reference too: the write then
    copies the buffer instead, and that reader keeps its values. capacity: the positions
    preallocated (generate: the prompt and up to 1024 new tokens); a forward past it grows the buffers to
    at least twice their size (one copy).

    Rows of different lengths (a forward with an attention_mask, tgrad.models.padding): each
    layer's buffers become [B * capacity, H_kv, head_dim], row r's slots at r * capacity ..., so
    that each row writes its new positions at its own length (one slice_scatter per row), and
    `lengths` holds each row's length (`length` is then the longest)."""

    def __init__(self, layers: int, capacity: int = 0) -> None:
        self.keys: list[Tensor | None] = [None] * layers
        self.values: list[Tensor | None] = [None] * layers
        self.length = 0
        self.capacity = capacity
        self.batch: int | None = None
        self.lengths: np.ndarray | None = None
        self.step: StepInputs | None = None  # a decode step's data inputs (tgrad.models.step)

    def _buffer(self, old: Tensor | None, like: Tensor, capacity: int) -> Tensor:
        b, heads, _, e = like.shape
        fresh = zeros(b, heads, capacity, e, dtype=like.dtype, device=like.device)
        if old is None or not self.length:
            return fresh
        return slice_scatter(fresh, old[:, :, :self.length, :], 2, 0)

    def append(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write positions length .. length + L - 1 of layer's keys and values (k, v [B, H_kv, L, E]);
        the views of every position so far. The caller advances `length` once all layers wrote."""
        end = self.length + k.shape[2]
        held = self.keys[layer]
        if held is None or end > held.shape[2]:
            if end > self.capacity:  # every layer grows to it in turn
                self.capacity = max(end, 2 * self.capacity)
            self.keys[layer] = self._buffer(self.keys[layer], k, self.capacity)
            self.values[layer] = self._buffer(self.values[layer], v, self.capacity)
        keys, values = self.keys[layer], self.values[layer]
        assert keys is not None and values is not None
        self.keys[layer] = self.values[layer] = None  # the write must hold the only reference
        at, seen = (self.length, end) if self.step is None else (self.step.at, self.step.seen)
        keys = slice_scatter(keys, k, 2, at)
        values = slice_scatter(values, v, 2, at)
        self.keys[layer], self.values[layer] = keys, values
        return keys.narrow(2, 0, seen), values.narrow(2, 0, seen)

    def _rows_buffer(self, old: Tensor | None, like: Tensor, capacity: int) -> Tensor:
        """A [B * capacity, H_kv, E] buffer holding old's slots 0 .. length-1 of each row (old:
        this layout, or the one-length layout [B, H_kv, capacity, E])."""
        b, heads, _, e = like.shape
        fresh = zeros(b * capacity, heads, e, dtype=like.dtype, device=like.device)
        if old is None or not self.length:
            return fresh
        held = old.shape[0] // b
        for r in range(b):
            rows = old[r, :, :self.length, :].transpose(0, 1) if old.ndim == 4 else old[r * held:r * held + self.length]
            fresh = slice_scatter(fresh, rows, 0, r * capacity)
        return fresh

    def append_rows(self, layer: int, k: Tensor, v: Tensor, start: np.ndarray) -> tuple[Tensor, Tensor]:
        """Write row r's positions start[r] .. start[r] + L - 1 of layer's keys and values (k, v
        [B, H_kv, L, E]); views [B, H_kv, max(start) + L, E] of every row's slots, which hold
        padding (or nothing) past the row's own length: the mask hides them."""
        b, heads, length, e = k.shape
        end = int(start.max()) + length
        held = self.keys[layer]
        grow = held is None or held.ndim == 4 or end > held.shape[0] // b
        del held  # a reference to the buffer would make the write below copy it
        if grow:
            if end > self.capacity:
                self.capacity = max(end, 2 * self.capacity)
            self.keys[layer] = self._rows_buffer(self.keys[layer], k, self.capacity)
            self.values[layer] = self._rows_buffer(self.values[layer], v, self.capacity)
        keys, values = self.keys[layer], self.values[layer]
        assert keys is not None and values is not None
        self.keys[layer] = self.values[layer] = None  # the writes must hold the only reference
        capacity = keys.shape[0] // b
        for r in range(b):
            if r:  # a pending write's result is not handed on in place: realize it first
                keys, values = keys.realize(), values.realize()
            at = r * capacity + int(start[r])
            keys = slice_scatter(keys, k[r].transpose(0, 1), 0, at)
            values = slice_scatter(values, v[r].transpose(0, 1), 0, at)
        self.keys[layer], self.values[layer] = keys, values
        return (keys.reshape(b, capacity, heads, e)[:, :end].transpose(1, 2),
                values.reshape(b, capacity, heads, e)[:, :end].transpose(1, 2))


def _visible(length: int, offset: int, window: int | None, sources: int | None = None) -> np.ndarray:
    """Which keys j of 0 .. sources-1 (default offset + length) each query i of offset ..
    offset+length-1 sees: j <= i, and i - j < window with a window ([length, sources] bool)."""
    i = np.arange(offset, offset + length)[:, None]
    j = np.arange(offset + length if sources is None else sources)[None, :]
    visible = j <= i
    if window is not None:
        visible &= i - j < window
    return visible


def _additive(visible: np.ndarray, device: str) -> Tensor:
    """The float32 additive mask of `visible` on `device`: 0 where visible, -inf elsewhere."""
    return Tensor.from_numpy(np.where(visible, 0.0, -np.inf).astype(np.float32), dtype=float32, device=device)


def _mask(length: int, offset: int, window: int | None, device: str) -> Tensor | None:
    """The additive mask [length, offset + length] of queries at positions offset .. offset+length-1
    on `device`: 0 where key j is visible (j <= i, and i - j < window with a window), -inf
    elsewhere; None when every key is visible (one query with no window cutting the past)."""
    visible = _visible(length, offset, window)
    return None if visible.all() else _additive(visible, device)


def _transposed(layer: nn.Linear) -> Tensor:
    """layer.weight.T, the view made once per weight value (when the model is built, again only if
    the weight is replaced or given a new value in place, as an optimizer step does: the handle
    changes): a decode step reads every weight, and making the view each time was a tenth of the
    Python time of a step."""
    w = layer.weight
    hit = layer.__dict__.get("_weight_t")
    if hit is None or hit[0] is not w or hit[1] != w._handle:
        hit = (w, w._handle, w.T)
        layer.__dict__["_weight_t"] = hit
    view: Tensor = hit[2]
    return view


def linear(layer: nn.Linear | nn.PackedLinear, x: Tensor) -> Tensor:
    """layer(x) without a bias: the product rounded once to bf16 (the op nn.Linear runs:
    the rows of x times weight.T). With a bias, as torch's F.linear rounds it: the product's fp32
    accumulators plus the bias, rounded to float32, then to bf16 (nn.Linear rounds the product
    first, then the sum: two bf16 roundings). A packed layer (CausalLM.pack_weights) computes the
    same sums from its panels: the same bytes."""
    if isinstance(layer, nn.PackedLinear):
        if layer.bias is None:
            return layer.product(x)
        return (layer.product(x, out_dtype=float32) + layer.bias).bfloat16()
    if layer.bias is None:  # x's leading axes broadcast over W.T: its rows, one product (x @ W.T)
        return x @ _transposed(layer)
    *lead, d = x.shape
    rows = x.reshape(-1, d) if len(lead) != 1 else x
    summed = rows.matmul(_transposed(layer), out_dtype=float32) + layer.bias
    return summed.bfloat16().reshape(*lead, layer.out_features)


def _scale(owner: nn.Module, e: int, like: Tensor) -> Tensor:
    """1/sqrt(E) as the float32 0-d tensor `scores * (1.0 / sqrt(E))` would make of the number
    (ops._constant: rounded once), made once per module and device (with the module, for its
    weights' device) and kept outside its parameters and buffers: a decode step multiplies by it
    in every layer, and making it took a tenth of the step's Python time."""
    kept = owner.__dict__.setdefault("_scales", {})
    hit: Tensor | None = kept.get(like.device)
    if hit is None:
        hit = kept[like.device] = Tensor.from_numpy(np.asarray(1.0 / float(np.sqrt(e))), device=like.device,
                                                    dtype=float32)
    return hit


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: Tensor | None = None) -> Tensor:
    """softmax(q @ k.mT / sqrt(E) + mask) @ v for q [B, H, L, E] and k, v [B, H_kv, S, E],
    query head h reading key/value head h // (H / H_kv) without copying k or v: the scores are
    the product's fp32 accumulators (unrounded), times 1/sqrt(E) in float32, plus the float32
    mask; the softmax of those float32 values correctly rounded to bf16; its product with v
    rounded once to bf16 (docs/models.md). scale: 1/sqrt(E) made once as a float32 0-d tensor
    (the number the default rounds the same way)."""
    b, heads, length, e = q.shape
    kv_heads, sources = k.shape[1], k.shape[2]
    group = heads // kv_heads
    grouped = q.reshape(b, kv_heads, group * length, e)
    scores = grouped.matmul(k.mT, out_dtype=float32) * (1.0 / float(np.sqrt(e)) if scale is None else scale)
    if mask is not None:
        scores = (scores.reshape(b, kv_heads, group, length, sources) + mask).reshape(
            b, kv_heads, group * length, sources)
    probs = softmax(scores, dim=-1, dtype=bfloat16)
    return (probs @ v).reshape(b, heads, length, e)


def _heads(x: Tensor, b: int, length: int, heads: int, e: int) -> Tensor:
    """x [B, L, heads * E] as [B, heads, L, E] (a view): the reshape, then heads before
    positions; one position (a decode step) is the reshape alone, the same elements (a
    transpose's one Python op less for each of q, k and v)."""
    if length == 1:
        return x.reshape(b, heads, 1, e)
    return x.reshape(b, length, heads, e).transpose(1, 2)


class Attention(nn.Module):
    """Grouped-query self-attention with rope: q, k, v projections (bias with Qwen2 or Llama's
    attention_bias), rope on q and k, `attend`, the o projection."""

    def __init__(self, config: ModelConfig, weights: Mapping[str, Tensor]) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        self.rope_theta = config.rope_theta
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self, name, nn.Linear.from_tensors(weights[f"{name}.weight"], weights.get(f"{name}.bias")))
            _transposed(getattr(self, name))
        _scale(self, self.head_dim, self.q_proj.weight)  # made with the model, on its weights' device

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor | None, inv_freq: Tensor | None,
                cache: KVCache | None = None, layer: int = 0, start: np.ndarray | None = None) -> Tensor:
        """start: each row's cached length when rows differ (KVCache.append_rows), else None."""
        b, length, _ = x.shape
        if "qkv_proj" in self._modules:  # packed and fused (CausalLM.pack_weights): one product, three views
            nq, nkv = self.heads * self.head_dim, self.kv_heads * self.head_dim
            y = linear(self.qkv_proj, x)
            qx, kx, vx = y.narrow(-1, 0, nq), y.narrow(-1, nq, nkv), y.narrow(-1, nq + nkv, nkv)
        else:
            qx, kx, vx = linear(self.q_proj, x), linear(self.k_proj, x), linear(self.v_proj, x)
        q = _heads(qx, b, length, self.heads, self.head_dim)
        k = _heads(kx, b, length, self.kv_heads, self.head_dim)
        v = _heads(vx, b, length, self.kv_heads, self.head_dim)
        q = rope(q, positions, self.rope_theta, inv_freq=inv_freq)
        k = rope(k, positions, self.rope_theta, inv_freq=inv_freq)
        if cache is not None:
            k, v = cache.append(layer, k, v) if start is None else cache.append_rows(layer, k, v, start)
        y = attend(q, k, v, mask, _scale(self, self.head_dim, q))
        merged = y.reshape(b, 1, -1) if length == 1 else y.transpose(1, 2).reshape(b, length, -1)
        return linear(self.o_proj, merged)


class MLP(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x))."""

    def __init__(self, weights: Mapping[str, Tensor]) -> None:
        super().__init__()
        for name in ("gate_proj", "up_proj", "down_proj"):
            setattr(self, name, nn.Linear.from_tensors(weights[f"{name}.weight"], weights.get(f"{name}.bias")))
            _transposed(getattr(self, name))

    def forward(self, x: Tensor) -> Tensor:
        if "gate_up_proj" in self._modules:  # packed and fused (CausalLM.pack_weights)
            y = linear(self.gate_up_proj, x)
            half = y.shape[-1] // 2
            return linear(self.down_proj, F.silu(y.narrow(-1, 0, half)) * y.narrow(-1, half, half))
        return linear(self.down_proj, F.silu(linear(self.gate_proj, x)) * linear(self.up_proj, x))


class DecoderLayer(nn.Module):
    """x + attn(norm(x)), then h + mlp(norm(h)), each sum rounded once."""

    def __init__(self, config: ModelConfig, weights: Mapping[str, Tensor], window: int | None) -> None:
        super().__init__()
        self.window = window
        eps = config.rms_norm_eps
        self.self_attn = Attention(config, _Under(weights, "self_attn"))
        self.mlp = MLP(_Under(weights, "mlp"))
        self.input_layernorm = nn.RMSNorm(config.hidden_size, eps=eps, weight=weights["input_layernorm.weight"])
        self.post_attention_layernorm = nn.RMSNorm(config.hidden_size, eps=eps,
                                                   weight=weights["post_attention_layernorm.weight"])

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor | None, inv_freq: Tensor | None,
                cache: KVCache | None = None, layer: int = 0, start: np.ndarray | None = None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), positions, mask, inv_freq, cache, layer, start)
        out: Tensor = x + self.mlp(self.post_attention_layernorm(x))
        return out


class _Under(Mapping[str, Tensor]):
    """weights' entries under `prefix.`, named without it: a view, so that a mapping reading each
    tensor when it is asked for (from_pretrained's) reads only what a module asks for."""

    __slots__ = ("_weights", "_lead")

    def __init__(self, weights: Mapping[str, Tensor], prefix: str) -> None:
        self._weights, self._lead = weights, prefix + "."

    def __getitem__(self, name: str) -> Tensor:
        return self._weights[self._lead + name]

    def __iter__(self) -> Iterator[str]:
        return (name[len(self._lead):] for name in self._weights if name.startswith(self._lead))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Model(nn.Module):
    """embed_tokens, the decoder layers, the final norm: hidden states [B, L, hidden]."""

    def __init__(self, config: ModelConfig, weights: Mapping[str, Tensor], inv_freq: np.ndarray | None,
                 pack: bool = False) -> None:
        """pack: each layer's projections packed as soon as it is built (tgrad.models.packing)."""
        super().__init__()
        self.embed_tokens = nn.Embedding.from_pretrained(weights["embed_tokens.weight"])
        layers = []
        for i in range(config.num_hidden_layers):
            layer = DecoderLayer(config, _Under(weights, f"layers.{i}"), config.windows[i])
            if pack:
                pack_layer(layer)
            layers.append(layer)
        self.layers = nn.ModuleList(layers)
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps, weight=weights["norm.weight"])
        device = self.embed_tokens.weight.device  # the weights' (from_pretrained's device=)
        self.register_buffer("inv_freq", None if inv_freq is None else Tensor.from_numpy(inv_freq, dtype=float32,
                                                                                         device=device))

    @property
    def device(self) -> str:
        """Where the weights live ("cpu", "opencl", ...): the forward's ids, positions, masks and
        KV cache are made there (Module.to moves the weights and the rope table together)."""
        return self.embed_tokens.weight.device

    def forward(self, ids: Tensor, cache: KVCache | None = None, rows: Plan | None = None) -> Tensor:
        """rows: a padded batch's arrangement (tgrad.models.padding); ids are then arranged."""
        if rows is not None:
            return self._rows(ids, cache, rows)
        length, device = ids.shape[1], self.device
        offset = 0 if cache is None else cache.length
        step = None if cache is None else cache.step
        positions = step.at if step is not None else Tensor.from_numpy(
            np.arange(offset, offset + length, dtype=np.int32), dtype=int32, device=device)  # once for every rope
        masks: dict[int | None, Tensor | None] = {} if step is None else dict(step.masks)
        x = self.embed_tokens(ids)
        for i, layer in enumerate(self.layers):
            if layer.window not in masks:
                masks[layer.window] = _mask(length, offset, layer.window, device)
            x = layer(x, positions, masks[layer.window], self.inv_freq, cache, i)
        if cache is not None:
            cache.length += length
        hidden: Tensor = self.norm(x)
        return hidden

    def _rows(self, ids: Tensor, cache: KVCache | None, rows: Plan) -> Tensor:
        length = ids.shape[1]
        sources = length + (int(rows.start.max()) if cache is not None else 0)
        positions = rows.positions(self.device)
        start = rows.start if cache is not None else None
        masks: dict[int | None, Tensor | None] = {}
        x = self.embed_tokens(ids)
        for i, layer in enumerate(self.layers):
            if layer.window not in masks:
                masks[layer.window] = additive_mask(rows, layer.window, sources, self.device)
            x = layer(x, positions, masks[layer.window], self.inv_freq, cache, i, start)
        if cache is not None:
            cache.lengths = rows.start + rows.real
            cache.length = int(cache.lengths.max())
        hidden: Tensor = self.norm(x)
        return hidden


class CausalLM(nn.Module):
    """A Llama-family causal language model: `model(ids)` gives logits [B, L, vocab]
    (tgrad.bfloat16, or float32 with logits_dtype=tgrad.float32: lm_head's fp32 accumulators,
    unrounded); `generate` decodes (tgrad.models.generate)."""

    def __init__(self, config: ModelConfig, weights: Mapping[str, Tensor], inv_freq: np.ndarray | None,
                 logits_dtype: Any = None, *, pack_weights: bool = False) -> None:
        """weights: every tensor the model reads, by its checkpoint name (a dict, or a mapping that
        reads each when asked, as from_pretrained's does). pack_weights: as the method below
        does, each layer as soon as it is built."""
        super().__init__()
        self.config = config
        # an untied lm_head is read (and packed) first, while little else is held: its packing's
        # transient copy then does not add to the whole model's
        head: nn.Linear | nn.PackedLinear | None = None
        if not config.tie_word_embeddings:
            head = nn.Linear.from_tensors(weights["lm_head.weight"])
            head = packed(head) if pack_weights else head
        self.model = Model(config, _Under(weights, "model"), inv_freq, pack=pack_weights)
        self.lm_head: nn.Linear | nn.PackedLinear = (
            head if head is not None else nn.Linear.from_tensors(self.model.embed_tokens.weight))
        if isinstance(self.lm_head, nn.Linear):
            _transposed(self.lm_head)
        self.logits_dtype = _logits_dtype(logits_dtype)

    @property
    def device(self) -> str:
        """Where the model runs: its weights' device (from_pretrained's device=, or Module.to)."""
        return self.model.device

    def new_cache(self, capacity: int = 0) -> KVCache:
        """An empty KV cache for `forward(ids, cache=...)`, its buffers preallocated for
        `capacity` positions when the first forward writes (it grows past them)."""
        return KVCache(self.config.num_hidden_layers, _as_count(capacity, "capacity"))

    def forward(self, ids: Any, cache: KVCache | None = None, *, attention_mask: Any = None,
                logits_to_keep: int = 0, logits_dtype: Any = None) -> Tensor:
        """Logits [B, L, vocab] of token ids [B, L] (a numpy integer array, anything numpy reads
        as one, or an int32 Tensor). With a cache, ids continue the cached positions, which are
        then extended by them. attention_mask [B, L] (ids' shape; with a cache, of the new ids
        only): 1 for a real token, 0 for padding (numpy bool or integers, or a Tensor); each row
        is then its real tokens alone, and its logits at those positions are the bytes of that
        row run alone (docs/models.md, tgrad.models.padding); the padding's logits are finite
        and meaningless. logits_to_keep > 0: only the last that many positions' logits."""
        return self._forward(ids, cache, attention_mask, logits_to_keep, logits_dtype, last_real=False)

    def _forward(self, ids: Any, cache: KVCache | None, attention_mask: Any, logits_to_keep: Any,
                 logits_dtype: Any, last_real: bool) -> Tensor:
        """forward; last_real: only each row's last real position's logits ([B, 1, vocab])."""
        keep = _as_count(logits_to_keep, "logits_to_keep")
        dtype = _logits_dtype(logits_dtype) or self.logits_dtype
        tokens, shape = self._ids(ids)  # every argument checked before the cache changes
        real = None if attention_mask is None else check_mask(attention_mask, shape, type(self).__name__)
        self._check_cache(cache, shape)
        if real is not None and real.all():
            real = None  # nothing padded: the same bytes either way
        if real is None and (cache is None or cache.lengths is None):
            hidden = self.model(tokens, cache)
            if last_real:
                keep = 1
        else:
            rows = plan(np.ones(shape, bool) if real is None else real, self._starts(cache, shape[0]))
            arranged = tokens if rows.identity else rows.arrange(tokens)
            hidden = self.model(arranged, cache, rows)
            hidden = rows.last_real(hidden) if last_real else hidden if rows.identity else rows.restore(hidden)
        if keep:
            hidden = hidden.narrow(1, -min(keep, hidden.shape[1]), min(keep, hidden.shape[1]))
        logits = self._head(hidden, dtype)
        if tokens.device == "cpu" or (cache is not None and cache.step is not None):
            return logits  # (a decode step made for capture stays pending on its device: tgrad.models.step)
        return logits.to("cpu")  # the CPU's Tensor, whatever the device

    @staticmethod
    def _starts(cache: KVCache | None, batch: int) -> np.ndarray:
        if cache is None:
            return np.zeros(batch, np.int64)
        return cache.lengths if cache.lengths is not None else np.full(batch, cache.length, np.int64)

    def _head(self, hidden: Tensor, dtype: Any) -> Tensor:
        if isinstance(self.lm_head, nn.PackedLinear):
            packed: Tensor = self.lm_head.product(hidden, out_dtype=dtype if dtype is float32 else None)
            return packed
        if dtype is not float32:
            logits: Tensor = self.lm_head(hidden)
            return logits
        b, length, d = hidden.shape
        rows = hidden.reshape(b * length, d).matmul(_transposed(self.lm_head), out_dtype=float32)
        return rows.reshape(b, length, self.config.vocab_size)

    def _ids(self, ids: Any) -> tuple[Tensor, tuple[int, ...]]:
        vocab = self.config.vocab_size
        if isinstance(ids, Tensor):
            if ids.dtype is not int32:
                raise errors.DtypeUnsupportedError(f"{type(self).__name__}: ids is a {ids.dtype} Tensor, expected int32")
            shape = ids.shape
            tokens = ids.to(self.device)
        else:
            array = np.asarray(ids)
            if array.dtype.kind not in "iu":
                raise errors.InvalidArgumentError(
                    f"{type(self).__name__}: ids must be integers, got a {array.dtype} array")
            if array.size and (array.min() < 0 or array.max() >= vocab):
                raise errors.IndexOutOfRangeError(
                    f"{type(self).__name__}: token id {int(array.min() if array.min() < 0 else array.max())} is "
                    f"outside the vocabulary [0, {vocab})")
            shape = array.shape
            tokens = Tensor.from_numpy(np.ascontiguousarray(array, np.int32), dtype=int32, device=self.device)
        if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
            raise errors.ShapeMismatchError(f"{type(self).__name__}: ids is {list(shape)}, expected [batch >= 1, length >= 1]")
        return tokens, tuple(int(n) for n in shape)

    def _check_cache(self, cache: KVCache | None, shape: tuple[int, ...]) -> None:
        if cache is not None:
            if cache.batch is not None and cache.batch != shape[0]:
                raise errors.ShapeMismatchError(
                    f"{type(self).__name__}: ids has batch {shape[0]}, the cache holds batch {cache.batch}")
            if len(cache.keys) != self.config.num_hidden_layers:
                raise errors.InvalidArgumentError(f"{type(self).__name__}: the cache is not this model's")
            cache.batch = shape[0]

    def pack_weights(self) -> CausalLM:
        """Holds each projection's weight (q, k, v, o, gate, up, down, and lm_head unless tied to
        the embedding) as 32-column panels (tgrad.nn.PackedLinear) instead of [out, in]: one-row
        products (decoding) stream each panel without transposes, and every logit keeps its bytes.
        Each weight is copied into its panels and the [out, in] copy dropped, one layer at a time,
        so memory stays at one copy of the weights plus one layer's. q, k and v become one layer,
        `qkv_proj`, and gate and up one, `gate_up_proj` (PackedLinear.fused: one product where
        there were several, each output its own layer's bytes), where all of them pack. Layers
        whose out_features is not a multiple of 32 stay as they are. The panels are the
        parameters afterwards (named `<layer>.panels`); PackedLinear.weight unpacks one.
        Returns self. (tgrad.models.packing; from_pretrained(pack_weights=True) packs each layer
        as it is read instead.)"""
        for layer in self.model.layers:
            pack_layer(cast(DecoderLayer, layer))
        pack_head(self)
        return self

    def generate(self, ids: Any, max_new_tokens: int, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, seed: int | None = None, *,
                 eos_token_id: int | list[int] | None = None, return_logits: bool = False,
                 attention_mask: Any = None) -> Any:
        """New token ids [B, max_new_tokens] (numpy int64) after the prompt ids [B, L]: greedy,
        or sampled with do_sample (see tgrad.models.generate.generate). attention_mask: the
        prompts' real tokens (1) and padding (0), left-padded as transformers pads them (or
        padded anywhere): each row continues its own real tokens."""
        from .generate import generate

        return generate(self, ids, max_new_tokens, do_sample=do_sample, temperature=temperature, top_k=top_k,
                        top_p=top_p, seed=seed, eos_token_id=eos_token_id, return_logits=return_logits,
                        attention_mask=attention_mask)

    def extra_repr(self) -> str:
        c = self.config
        return (f"{c.architecture}: {c.num_hidden_layers} layers, hidden {c.hidden_size}, heads {c.num_attention_heads} "
                f"(kv {c.num_key_value_heads}), vocab {c.vocab_size}")


def _as_count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise errors.InvalidArgumentError(f"{what} must be an integer >= 0, got {value!r}")
    return int(value)


def _logits_dtype(dtype: Any) -> Any:
    if dtype is None:
        return None
    if dtype in (float32, "float32"):
        return float32
    if dtype in (bfloat16, "bfloat16"):
        return bfloat16
    raise errors.DtypeUnsupportedError(f"logits_dtype must be tgrad.bfloat16 or tgrad.float32, got {dtype!r}")
