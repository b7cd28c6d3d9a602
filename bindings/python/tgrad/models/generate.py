"""Token-by-token decoding with a KV cache: greedy, or sampling from tgrad's counter-based generator.

Each step runs the model on the new positions only (the prompt first, then one token), appending
to the cache, and takes the last position's logits as lm_head's float32 accumulators (unrounded:
a near-tie between two tokens is decided on more bits than bf16 logits hold). The one-token steps
run as captured programs where they can (tgrad.models.step: the step's graph built in Python once
per 32 positions; the same bytes).

- Greedy: the first index of the largest logit (numpy's argmax).
- Sampling (do_sample=True), on the host, per row: the float32 logits divided by temperature
  (one IEEE float32 division each); with top_k, every logit below the k-th largest becomes -inf
  (ties with it stay); probabilities by tgrad.softmax in float32 (correctly rounded); with top_p,
  the tokens in descending probability order (ties by index) are kept while the probability
  before them sums to less than top_p (the first always); a uniform u in [0, 1) from
  tgrad.random.Generator(seed).rand (Philox: the same bytes on every machine) picks the first
  token, in index order, whose float64 running sum of kept probabilities exceeds u times their
  total. So the same seed gives the same tokens everywhere. seed=None draws from the global
  generator (tgrad.manual_seed).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import errors, random
from ..dtypes import float32
from ..softmax import softmax
from ..tensor import Tensor
from .step import DecodeSteps

if TYPE_CHECKING:
    from .llama import CausalLM

__all__ = ["generate", "choose"]

#: decode steps through captured programs (tgrad.models.step); False builds every step op by op
#: (the same bytes: tests/python/test_models_step.py compares them)
STEP_PROGRAMS = True


def _count(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise errors.InvalidArgumentError(f"generate: {what} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _sampling(temperature: Any, top_k: Any, top_p: Any) -> tuple[float, int | None, float | None]:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
            math.isfinite(temperature) and temperature > 0):
        raise errors.InvalidArgumentError(f"generate: temperature must be a positive number, got {temperature!r}")
    k = None if top_k is None else _count(top_k, "top_k", 1)
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise errors.InvalidArgumentError(f"generate: top_p must be in (0, 1], got {top_p!r}")
    return float(temperature), k, None if top_p is None else float(top_p)


def choose(logits: np.ndarray, do_sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
           top_p: float | None = None, generator: random.Generator | None = None) -> np.ndarray:
    """The next token of each row of float32 logits [B, vocab] (module docstring)."""
    if not do_sample:
        best: np.ndarray = np.argmax(logits, axis=-1).astype(np.int64)
        return best
    scaled = (logits.astype(np.float32) / np.float32(temperature)).astype(np.float32)
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = -np.sort(-scaled, axis=-1)[:, top_k - 1:top_k]
        scaled = np.where(scaled < kth, np.float32(-np.inf), scaled)
    probs = softmax(Tensor.from_numpy(np.ascontiguousarray(scaled), dtype=float32), dim=-1).numpy().astype(np.float64)
    if top_p is not None:
        order = np.argsort(-probs, axis=-1, kind="stable")
        ranked = np.take_along_axis(probs, order, axis=-1)
        before = np.cumsum(ranked, axis=-1) - ranked
        keep_ranked = before < top_p
        keep_ranked[:, 0] = True
        keep = np.zeros_like(keep_ranked)
        np.put_along_axis(keep, order, keep_ranked, axis=-1)
        probs = np.where(keep, probs, 0.0)
    draw = (generator.rand if generator is not None else random.rand)(probs.shape[0], dtype=float32)
    u = draw.numpy().astype(np.float64)
    running = np.cumsum(probs, axis=-1)
    target = u * running[:, -1]
    picked = np.array([int(np.argmax(row > t)) for row, t in zip(running, target)], dtype=np.int64)
    return picked


def generate(model: CausalLM, ids: Any, max_new_tokens: int, *, do_sample: bool = False, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
             eos_token_id: int | list[int] | None = None, return_logits: bool = False,
             attention_mask: Any = None) -> Any:
    """The new token ids [B, max_new_tokens] (numpy int64) after the prompt `ids` [B, L].
    attention_mask [B, L]: 1 for the prompts' real tokens, 0 for padding (left padding, as
    transformers pads for generation; right or anywhere works too): row r's new tokens continue
    its real tokens, the bytes of generating from that prompt alone (tgrad.models.padding).
    eos_token_id: once a row has produced one of these, its later tokens repeat it, and decoding
    stops when every row has (the result is then shorter). return_logits: also the float32 logits
    [B, new, vocab] each token was chosen from."""
    new = _count(max_new_tokens, "max_new_tokens", 0)
    temperature, top_k, top_p = _sampling(temperature, top_k, top_p)
    stops = set() if eos_token_id is None else {int(e) for e in np.atleast_1d(eos_token_id)}
    generator = None if seed is None else random.Generator(seed)
    shape = ids.shape if isinstance(ids, Tensor) else np.shape(ids)
    # the cache preallocated for the prompt and the new tokens, at most 1024 of them up front (a run
    # that stops at eos_token_id early does not pay for the rest; past them it doubles)
    cache = model.new_cache(int(shape[-1]) + min(new, 1024) if len(shape) == 2 else 0)  # forward checks the shape
    step = model._forward(ids, cache, attention_mask, 0, float32, last_real=True)
    steps = DecodeSteps(model, cache, programs=STEP_PROGRAMS)
    batch = step.shape[0]
    tokens: list[np.ndarray] = []
    kept: list[np.ndarray] = []
    done = np.zeros(batch, dtype=bool)
    for t in range(new):
        logits = step.numpy()[:, -1, :]
        choice = choose(logits, do_sample, temperature, top_k, top_p, generator)
        if stops:
            choice = np.where(done, tokens[-1] if tokens else choice, choice)
            done |= np.isin(choice, list(stops))
        tokens.append(choice)
        kept.append(logits)
        if t + 1 == new or (stops and done.all()):
            break
        step = steps(choice[:, None])
    out = np.stack(tokens, axis=1) if tokens else np.zeros((batch, 0), dtype=np.int64)
    if return_logits:
        vocab = model.config.vocab_size
        return out, np.stack(kept, axis=1) if kept else np.zeros((batch, 0, vocab), np.float32)
    return out
