"""``python -m tgrad bench --graph``'s reports: the ``key: value`` lines per block, bench-graph.md,
and bench-graph.json with the method it records."""

from __future__ import annotations

import argparse
import datetime as _dt
import math
from pathlib import Path
from typing import Any

from .graph_blocks import KIND_LABELS, REGION_LABELS
from .lines import _fmt_s, disturbed_warning
from .record import _report_head, save_report
from .report import _fmt_gflops, _fmt_load, _fmt_ratio, _fmt_time, _load_line
from .stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED

DOC_BEGIN, DOC_END = "<!-- bench-graph:begin -->", "<!-- bench-graph:end -->"


def _fmt_diff(d: dict[str, Any] | None) -> str:
    if not d or not math.isfinite(d.get("max_abs", math.nan)):
        return "—" if not d else str(d.get("detail", "—"))
    # no '|' in the text: it is a markdown table cell
    share = 100 * d["differ_share"]
    digits = 1 if 0 < share < 1 else 0  # 0.4%, not 0%, when a few elements differ
    return (f"{d['max_abs']:.3g} (largest output {d['max_abs_out']:.3g}; "
            f"{share:.{digits}f}% of elements differ)")


def format_block(res: dict[str, Any]) -> list[str]:
    """The key: value lines printed for one block (the first five are the stable contract)."""
    equal = res["fused_equals_unfused"]
    lines = [
        f"graph_block: {res['spec']}",
        f"graph_name: {res['block']}",
        f"graph_fused_equals_unfused: {'none' if equal is None else str(equal).lower()}",
        f"graph_pipeline_ok: {str(res['pipeline_ok']).lower()}",
        f"graph_median_s: {_fmt_s(res['median_s'])}",
        f"graph_gflops: {res['gflops']:.2f}",
        f"graph_repeat: {res['repeat']}",
        f"graph_threads: {res['threads']}",
        f"graph_cpu_isa: {res['cpu_isa']}",
        f"graph_matmul_order: {res['matmul_order']}",
    ]
    if res["routes"]:
        lines.append(f"graph_routes: {', '.join(res['routes'])}")
    for side in ("fused", "unfused"):
        if side in res["kernels"]:
            lines.append(f"graph_kernels_{side}: {', '.join(res['kernels'][side])}")
    if res["byte_detail"]:
        lines.append(f"graph_byte_detail: {res['byte_detail']}")
    if res.get("load"):
        lines.append(f"graph_others_cpu: {res['load']['others']:.3f}")
    for err in res["errors"]:
        lines.append(f"graph_error: {err}")
    compile_s = (res.get("torch_compile") or {}).get("compile_s")
    for name, p in res["peers"].items():
        lines.append(f"peer_{name}_median_s: {_fmt_s(p['median_s'])}")
        lines.append(f"ratio_{name}: {p['ratio']:.2f} [{p['lo']:.2f}, {p['hi']:.2f}] {p['verdict']}")
        if name in res["differences"]:
            lines.append(f"diff_{name}: {_fmt_diff(res['differences'][name])}")
        if name == "torch_compile" and compile_s is not None:
            lines.append(f"peer_torch_compile_compile_s: {compile_s:.1f}")
    for name, why in res["peers_skipped"].items():
        lines.append(f"peer_{name}: unavailable: {why.removeprefix('unavailable: ')}")
    return lines


def _bytes_cell(res: dict[str, Any]) -> str:
    if res["fused_equals_unfused"] is True:
        return "identical"
    if res["fused_equals_unfused"] is False:
        return "**DIFFER**"
    return "**FAILED**"


def _region_cells(res: dict[str, Any], name: str) -> list[str]:
    p = res["peers"].get(name)
    if p is None:
        why = res["peers_skipped"].get(name)
        return ["unavailable" if why else "—", "—"]
    return [_fmt_time(p["median_s"]), _fmt_ratio(p)]


def format_markdown(report: dict[str, Any]) -> str:
    """bench-graph.md: how it was run, then one row per block."""
    env, results = report["environment"], report["results"]
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items()
                         if v and k in ("numpy", "torch"))
    out = [
        f"# tgrad bench --graph, {report['date']}",
        "",
        f"Command: `{report['command']}`  ",
        f"CPU: {env['cpu_model']} ({env['cpus_usable']} usable CPUs; "
        f"{', '.join(env['cpu_flags']) or 'no flags read'}), load average at start "
        f"{', '.join(f'{x:.2f}' for x in env['loadavg'] or [])}, at end "
        f"{', '.join(f'{x:.2f}' for x in env.get('loadavg_end') or [])}  ",
        f"tgrad {env['tgrad_library']}, ISA `{env['tgrad_cpu_isa']}`, {report['threads']} threads, "
        f"matmul order `{report['matmul_order']}`; "
        f"torch threads: {report['peer_threads'].get('torch', '—')}; {versions}",
        "",
        _load_line(env.get("others_load")),
        "",
        "Each region computes a whole block into memory, inputs and weights resident: tgrad "
        "realized with fusion on (\"fused\") and off (`tgrad.set_fusion(False)`, \"unfused\"), "
        "torch eager bf16 (`F.linear`, `F.gelu`/`F.silu`) and `torch.compile` of the same function "
        "(`dynamic=False`, compiled before timing). Time is the median of interleaved rounds "
        "(order rotated each round). A ratio is the median over paired rounds of region time / "
        "tgrad fused time (> 1: tgrad fused is faster; for \"unfused\", what fusion saves) with "
        "a 95% bootstrap interval; **win** only when the interval is above 1, loss when below, "
        "else tie. \"fused = unfused\" is a byte-for-byte check before timing. The last column is "
        "the largest |tgrad - torch eager| (torch's F.linear rounds once after the bias, tgrad "
        "rounds each op).",
        "",
    ]
    head = ["block", "M", "fused = unfused", "reps", "others' CPU", "tgrad fused",
            "tgrad GFLOP/s", "tgrad unfused", "unfused / fused", "torch eager",
            "torch eager / tgrad", "torch.compile", "torch.compile / tgrad",
            "max diff vs torch eager"]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for res in results:
        row = [res["block"], str(res["m"]), _bytes_cell(res), str(res["repeat"]),
               _fmt_load(res.get("load")), _fmt_time(res["median_s"]),
               _fmt_gflops(res["gflops"])]
        for name in ("tgrad_unfused", "torch_eager", "torch_compile"):
            row += _region_cells(res, name)
        row.append(_fmt_diff(res["differences"].get("torch_eager")))
        out.append("| " + " | ".join(row) + " |")
    out += _notes(results)
    return "\n".join(out) + "\n"


def _notes(results: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    kernels = sorted({(r["kind"], ", ".join(r["kernels"].get("fused", [])),
                       len(r["kernels"].get("unfused", []))) for r in results if r["kernels"]})
    if kernels:
        out += ["", "Kernels (explain()): " + "; ".join(
            f"{KIND_LABELS[kind]} fused: {fused} (unfused: {n} kernels)"
            for kind, fused, n in kernels) + "."]
    compiled = [f"{r['spec']} {r['torch_compile']['compile_s']:.1f} s" for r in results
                if (r.get("torch_compile") or {}).get("compile_s") is not None]
    if compiled:
        out += ["", "torch.compile's compile time (first call): " + ", ".join(compiled) + "."]
    skipped = sorted({f"{REGION_LABELS.get(p, p)}: {why.removeprefix('unavailable: ')}"
                      for r in results for p, why in r["peers_skipped"].items()})
    if skipped:
        out += ["", "Unavailable: " + "; ".join(skipped) + "."]
    errors = [f"{r['spec']}: {e}" for r in results for e in r["errors"]]
    if errors:
        out += ["", "Errors:", ""] + [f"- {e}" for e in errors]
    return out


def _report(args: argparse.Namespace, env: dict[str, Any], started: _dt.datetime, threads: int,
            peer_threads: dict[str, str], results: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        **_report_head("tgrad-bench-graph/1", started, threads, peer_threads, env),
        "method": {
            "regions": {
                "tgrad": "the block's tgrad expression, .realize() with tgrad.set_fusion(True)",
                "tgrad_unfused": "the same with tgrad.set_fusion(False)",
                "torch_eager": "F.linear + F.gelu / F.silu on bf16 tensors sharing the input bytes",
                "torch_compile": "torch.compile(the same function, dynamic=False), compiled first",
            },
            "inputs": "x standard normal, weights and biases normal / sqrt(fan-in), rounded to "
                      "bf16 (RNE), seeded",
            "byte_check": "fused == unfused bit for bit before timing (else not timed, exit 1); "
                          "differences from torch reported, not required",
            "interleave": "the byte check is the first warm-up, a second round sizes the run; "
                          "per repetition every region once, order rotated by one per "
                          "repetition; gc disabled; quiet and hot as in tgrad.bench",
            "ratio": "median over repetitions i of samples[region][i] / samples['tgrad'][i]",
            "bootstrap": {"statistic": "median of the paired ratios", "interval": "percentile, 95%",
                          "resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED},
            "verdict": "win if lo > 1, loss if hi < 1, else tie",
        },
        "results": results,
    }


def _write(args: argparse.Namespace, report: dict[str, Any]) -> None:
    out_dir = Path(args.out)
    save_report(out_dir, "bench-graph", report, format_markdown(report), args.json, args.doc,
                begin=DOC_BEGIN, end=DOC_END)
    lines = [
        f"bench_cpu: {report['environment']['cpu_model']}",
        f"bench_markdown: {out_dir / 'bench-graph.md'}",
        f"bench_json: {out_dir / 'bench-graph.json'}" + (f" (and {args.json})" if args.json else ""),
    ] + ([f"bench_doc: {args.doc}"] if args.doc is not None else [])
    warning = disturbed_warning(report["environment"].get("others_load"))
    print()
    print("\n".join(lines + ([warning] if warning else [])), flush=True)
