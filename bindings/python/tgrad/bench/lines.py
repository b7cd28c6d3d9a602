"""What the bench prints on stdout: ``key: value`` lines per shape (the first six are the stable
contract), then a closing block naming the files written, with a warning when the run was
disturbed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .machine import _blas_summary, is_disturbed


def _fmt_s(x: float) -> str:
    return f"{x:.9f}" if math.isfinite(x) else "nan"


def _byte_match(res: dict[str, Any]) -> str:
    if res["byte_check"] == "done":
        return "true" if res["byte_match"] else "false"
    if res["byte_check"] == "pipeline failed":
        return "false"
    return str(res["byte_check"])


def format_shape(res: dict[str, Any], limits: dict[str, Any] | None = None) -> list[str]:
    """The key: value lines printed for one shape (the first six are the stable contract)."""
    lines = [
        f"py_shape: {res['shape']}",
        f"py_dtype: {res['dtype']}",
        f"py_byte_match: {_byte_match(res)}",
        f"py_pipeline_ok: {'true' if res['pipeline_ok'] else 'false'}",
        f"py_median_s: {_fmt_s(res['median_s'])}",
        f"py_gflops: {res['gflops']:.2f}",
        f"py_call_median_s: {_fmt_s(res['call_median_s'])}",
        f"py_repeat: {res['repeat']}",
        f"py_threads: {res['threads']}",
        f"py_cpu_isa: {res['cpu_isa']}",
        f"py_route: {res.get('route') or 'none'}",
        f"py_matmul_order: {res['matmul_order']}",
    ]
    return lines + _limit_lines(res, limits) + _problem_lines(res) + _peer_lines(res)


def _limit_lines(res: dict[str, Any], limits: dict[str, Any] | None) -> list[str]:
    lines = []
    peak = ((limits or {}).get("peak") or {}).get("gflops")
    if peak and math.isfinite(res["gflops"]):
        lines.append(f"py_peak_pct: {100 * res['gflops'] / peak:.1f}")
    if res.get("memory_bound") and math.isfinite(res["gbps"]):
        lines.append(f"py_gbps: {res['gbps']:.2f}")
    for name, key in (("limit_peak", "py_peak_pct_paired"), ("limit_read", "py_read_pct_paired")):
        lim = res.get("paired_limits", {}).get(name)
        if lim and math.isfinite(lim["share"]):
            lines.append(f"{key}: {100 * lim['share']:.1f} [{100 * lim['lo']:.1f}, "
                         f"{100 * lim['hi']:.1f}]")
    if res.get("load"):
        lines.append(f"py_others_cpu: {res['load']['others']:.3f}")
    return lines


def _problem_lines(res: dict[str, Any]) -> list[str]:
    lines = []
    if "mismatches" in res:
        fm = res["first_mismatch"]
        lines.append(f"py_mismatches: {res['mismatches']} (first at [{fm['m']}, {fm['n']}]: "
                     f"got {fm['got']}, want {fm['want']})")
    return lines + [f"py_error: {err}" for err in res["errors"]]


def _ratio(c: dict[str, Any]) -> str:
    return f"{c['ratio']:.2f} [{c['lo']:.2f}, {c['hi']:.2f}] {c['verdict']}"


def _peer_lines(res: dict[str, Any]) -> list[str]:
    lines = []
    for name, p in res["peers"].items():
        lines.append(f"peer_{name}_median_s: {_fmt_s(p['median_s'])}")
        lines.append(f"peer_{name}_threads: {p['threads']}")
        lines.append(f"ratio_{name}: {_ratio(p)}")
        if "call" in p:
            lines.append(f"ratio_call_{name}: {_ratio(p['call'])}")
    return lines


def disturbed_warning(load: dict[str, float] | None) -> str | None:
    """One line for stdout when other processes (or the hypervisor) took more than DISTURBED of
    the machine while timing: the verdicts of such a run are not to be trusted."""
    if load is None or not is_disturbed(load):
        return None
    return (f"bench_warning: this run was disturbed: other processes used "
            f"{100 * load['others']:.1f}% of the machine's CPU time and the hypervisor stole "
            f"{100 * load['steal']:.1f}% while timing; rerun on a quiet machine before reading "
            f"the verdicts")


def closing_lines(report: dict[str, Any], out_dir: Path, plot: str, json_copy: str | None,
                  doc: str | None) -> list[str]:
    """The block after the shapes: the machine in brief and the files written."""
    env, limits = report["environment"], report["limits"]
    peak = limits["peak"].get("gflops")
    lines = [
        f"bench_cpu: {env['cpu_model']}",
        f"bench_peak_gflops: {f'{peak:.1f}' if peak else 'not measured'} "
        f"({limits['peak']['source']})",
        f"bench_copy_gbps: {limits['stream']['copy_gbps']:.1f}",
        f"bench_numpy_blas: {_blas_summary(env)}",
        f"bench_markdown: {out_dir / 'bench.md'}",
        f"bench_json: {out_dir / 'bench.json'}" + (f" (and {json_copy})" if json_copy else ""),
        f"bench_plot: {plot}",
    ] + ([f"bench_doc: {doc}"] if doc is not None else [])
    if report.get("condition"):
        lines.append(f"bench_condition: {report['condition']}")
    warning = disturbed_warning(env.get("others_load"))
    return lines + ([warning] if warning else [])
