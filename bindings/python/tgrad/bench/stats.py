"""The statistics: paired ratios with a seeded percentile-bootstrap interval, the verdict, and a
peer's entry in a result (its speed and its ratios to tgrad)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


def bootstrap_ratio(peer: Any, ours: Any, *, seed: int = BOOTSTRAP_SEED,
                    resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float, float]:
    """Median of the paired ratios peer[i] / ours[i] and its percentile-bootstrap 95% interval.

    The two sample lists are paired by repetition (same index = same round of the interleaved
    loop), so load that hits one round hits both sides of its ratio. The resampling is seeded:
    the same samples always give the same interval. (Hand-written rather than scipy's bootstrap:
    scipy is not a dependency, and the resampling scheme is part of what the JSON records.)
    """
    peer = np.asarray(peer, dtype=np.float64)
    ours = np.asarray(ours, dtype=np.float64)
    if peer.shape != ours.shape or peer.ndim != 1 or len(ours) == 0:
        raise ValueError("bootstrap_ratio: two non-empty sample lists of the same length")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = peer / ours
    ratio = float(np.median(ratios))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ratios), size=(resamples, len(ratios)))
    lo, hi = np.percentile(np.median(ratios[idx], axis=1), [2.5, 97.5])
    return ratio, float(lo), float(hi)


def verdict(lo: float, hi: float) -> str:
    """'win' when the interval is above 1, 'loss' when below 1, else 'tie'."""
    if lo > 1:
        return "win"
    if hi < 1:
        return "loss"
    return "tie"


# Old private names, kept for callers of the first version.
_verdict = verdict


def _bootstrap_ratio(peer: np.ndarray, ours: np.ndarray, seed: int) -> tuple[float, float, float]:
    return bootstrap_ratio(peer, ours, seed=seed)


def _compared(peer: np.ndarray, ours: np.ndarray, seed: int) -> dict[str, Any]:
    ratio, lo, hi = bootstrap_ratio(peer, ours, seed=seed)
    return {"ratio": ratio, "lo": lo, "hi": hi, "verdict": verdict(lo, hi)}


def peer_entry(name: str, paired: dict[str, np.ndarray], flops: int, threads: str,
               phase: str | None, seed: int) -> dict[str, Any]:
    """A peer's speed and its ratios to tgrad's samples of the same rounds (`paired`), to
    tgrad's whole call too where that was timed."""
    s, call = paired[name], paired.get("tgrad_call")
    med = float(np.median(s))
    entry: dict[str, Any] = {"median_s": med, "gflops": flops / med / 1e9 if med > 0 else math.nan,
                             **_compared(s, paired["tgrad"], seed), "threads": threads}
    if phase is not None:  # paired with tgrad's samples in res["separate"][name]
        entry["phase"] = phase
    if call is not None:
        entry["call"] = _compared(s, call, seed)
    return entry
