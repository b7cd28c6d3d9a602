"""bench.png: GFLOP/s per shape per peer on a log scale, with the measured limits as lines
(needs matplotlib; without it the bench says so and goes on)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .peers import PEER_LABELS
from .report import _peer_names


def _roofs(ax: Any, x: Any, results: list[dict[str, Any]], peak: float | None,
           stream: float | None) -> None:
    """The measured peak as a line; for memory-bound shapes the roof the copy bandwidth allows."""
    if peak:
        ax.axhline(peak, color="black", linestyle="--", linewidth=1.2,
                   label=f"measured peak {peak:.0f} GFLOP/s")
    if stream:
        for xi, r in zip(x, results):
            if r.get("memory_bound"):
                roof = stream * r["flops"] / r["bytes"]
                ax.hlines(roof, xi - 0.45, xi + 0.45, colors="gray", linestyles=":", linewidth=2)
        ax.plot([], [], color="gray", linestyle=":", linewidth=2,
                label=f"memory roof ({stream:.0f} GB/s copy)")


def write_plot(report: dict[str, Any], path: Path) -> str:
    """bench.png: GFLOP/s per shape per peer (log scale), the measured compute peak as a line,
    and for memory-bound shapes the roof that the copy bandwidth allows. Returns the path written,
    or why nothing was."""
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]  # typed where installed

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]
    except Exception as exc:
        return f"skipped (matplotlib not importable: {type(exc).__name__})"
    results = [r for r in report["results"] if math.isfinite(r["gflops"]) and r["gflops"] > 0]
    if not results:
        return "skipped (no timed shape)"
    series = ["tgrad"] + _peer_names(results)
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.75 * len(results) + 3), 5.5))
    x = np.arange(len(results))
    for i, name in enumerate(series):
        values = [r["gflops"] if name == "tgrad" else r["peers"].get(name, {}).get("gflops", np.nan)
                  for r in results]
        ax.bar(x - 0.4 + width * (i + 0.5), values, width, label=PEER_LABELS.get(name, name))
    _roofs(ax, x, results, report["limits"]["peak"].get("gflops"),
           report["limits"]["stream"].get("copy_gbps"))
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels([r["shape"] for r in results], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("GFLOP/s (median, log scale)")
    env = report["environment"]
    ax.set_title(f"bf16 matmul, {env['cpu_model']}, {env['tgrad_threads']} threads, "
                 f"{report['date'][:10]}", fontsize=10)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
