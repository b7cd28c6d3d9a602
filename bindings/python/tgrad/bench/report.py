"""bench.md: how the run was made (machine, libraries, limits, load), how to read it, the speed
table and the whole-call table, then the peers not run and the errors."""

from __future__ import annotations

import math
from typing import Any

from .machine import DISTURBED, OPENBLAS_TUNING_VARS, SPIN_ENV, _blas_summary, is_disturbed
from .peers import ONE_THREAD, PEER_LABELS, SEPARATE_PEERS
from .shapes import CALL_TABLE_LIMIT_MACS

#: How to read the tables (a paragraph of bench.md).
READING = (
    "Time is the median of the interleaved repetitions of `(a @ b).realize()` (inputs "
    "resident). A ratio is the median of peer time / tgrad time over paired repetitions, "
    "> 1 means tgrad is faster, with a 95% bootstrap interval; **win** only when the interval "
    "is above 1, loss when below, else tie. GB/s (memory-bound shapes only) counts the bf16 "
    "operands read once and the output written once. \"% of peak: paired\" is the median "
    "over repetitions of (time of the shape's flops on the peak probe's instruction stream, "
    "`tgrad_cpu_peak_run`) / (tgrad's time), both timed in the same repetition, with a 95% "
    "bootstrap interval; \"of the best probe\" divides by the best compute limit of the run "
    "instead. \"% of the paired read\" is the same for a plain read of both operands' bytes "
    "(`tgrad_cpu_read_run`: one contiguous part per thread); \"of copy bw\" divides by the "
    "copy bandwidth above."
)
#: Added to READING when tgrad at one thread was timed (tgrad at T > 1 threads).
READING_ONE_THREAD = (
    " \"tgrad 1 thread\" is the same call with `tgrad.set_num_threads(1)` (set before the clock "
    "starts, set back after it stops; tgrad's own region makes the same two calls with T, so "
    "both run the same code outside the clock): its ratio > 1 means tgrad's T threads are faster "
    "than its one."
)


def _fmt_time(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "—"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _fmt_gflops(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 1 else f"{x:.3f}"


def _fmt_ratio(p: dict[str, Any] | None) -> str:
    if not p or p.get("ratio") is None or not math.isfinite(p["ratio"]):
        return "—"
    return f"{p['ratio']:.2f} [{p['lo']:.2f}, {p['hi']:.2f}] {p['verdict']}"


def _fmt_share(lim: dict[str, Any]) -> str:
    """A paired share of a limit: "91% [90, 92]"."""
    if not math.isfinite(lim["share"]):
        return "—"
    return f"{100 * lim['share']:.0f}% [{100 * lim['lo']:.0f}, {100 * lim['hi']:.0f}]"


def _fmt_load(load: dict[str, float] | None) -> str:
    if not load:
        return "—"
    share = load["others"] + load["steal"]
    return f"{100 * share:.0f}%" + (" **disturbed**" if share > DISTURBED else "")


def _load_line(load: dict[str, float] | None) -> str:
    if not load:
        return "Load from other processes: not measured (no /proc)."
    text = (f"While timing, other processes used {100 * load['others']:.1f}% of the machine's CPU "
            f"time and the hypervisor stole {100 * load['steal']:.1f}% (from /proc/stat; the "
            f"\"others' CPU\" column is the same per shape).")
    if is_disturbed(load):
        text = ("**This run was disturbed**: " + text + " Spinning thread pools (OpenMP, "
                "OpenBLAS) suffer most from a third runnable thread on 2 cores; rerun on a quiet "
                "machine before reading the verdicts.")
    return text


def _peer_names(results: list[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for res in results:
        for name in res["peers"]:
            if name not in names:
                names.append(name)
    return names


def _bytes_cell(res: dict[str, Any]) -> str:
    if res["byte_check"] == "done":
        return "ok" if res["byte_match"] else "**DIFFER**"
    if res["byte_check"] == "pipeline failed":
        return "**FAILED**"
    return "not checked"


def _memory_line(env: dict[str, Any]) -> str:
    scratch, rss = env.get("tgrad_cpu_scratch_bytes"), env.get("process_peak_rss_kib")
    parts = []
    if scratch is not None:
        parts.append(f"tgrad's CPU scratch (packing buffers and accumulator tiles, all threads, "
                     f"reused from call to call) after the run: {scratch / 2**20:.1f} MiB")
    if rss is not None:
        parts.append(f"peak RSS of the whole bench process (peers, oracle and inputs included): "
                     f"{rss / 1024:.0f} MiB")
    return "Memory: " + ("; ".join(parts) if parts else "not measured")


def _label(name: str) -> str:
    return PEER_LABELS.get(name, name)


def _isa_line(env: dict[str, Any], peers: list[str], peer_threads: dict[str, str],
              order: str) -> str:
    isa, stream_isa = env["tgrad_cpu_isa"], env.get("tgrad_cpu_stream_isa", env["tgrad_cpu_isa"])
    return (f"tgrad {env['tgrad_library']}, ISA `{isa}`"
            + (f" (packed products; `{stream_isa}` for one-row and few-row ones)"
               if stream_isa != isa else "")
            + f", {env['tgrad_threads']} threads, matmul order `{order}`; peers' threads: "
            + ", ".join(f"{_label(p)} {peer_threads.get(p, '?')}" for p in peers) + "  ")


def _blas_line(env: dict[str, Any]) -> str:
    if env["unset_by_launcher"]:
        tuning = ("OpenBLAS tuning variables unset by the launcher (value they had): "
                  + ", ".join(env["unset_by_launcher"]))
    else:
        tuning = "OpenBLAS tuning variables: " + (", ".join(
            f"{v}={env['env'][v]}" for v in OPENBLAS_TUNING_VARS if v in env["env"]) or "none set")
    return f"numpy BLAS: {_blas_summary(env)}; " + tuning + "  "


def _spin_line(env: dict[str, Any]) -> str:
    return ("Idle spinning of the peers' pools: "
            + ", ".join(f"{k}={env['env'].get(k, 'unset')}" for k in SPIN_ENV)
            + (" (set by the bench's re-exec)" if env["set_by_reexec"] else "")
            + "; before each timed region the bench waits until no other thread of the process "
            "runs.  ")


def _limits_line(limits: dict[str, Any]) -> str:
    peak, source = limits["peak"].get("gflops"), limits["peak"]["source"]
    stream = limits["stream"]
    return ("Measured limits: compute "
            + (f"{peak:.0f} GFLOP/s ({source})" if peak else f"not measured ({source})")
            + f"; memory {stream.get('copy_gbps'):.1f} GB/s ({stream['method']})  ")


def _head(report: dict[str, Any], peers: list[str]) -> list[str]:
    env, results = report["environment"], report["results"]
    separate = "".join(f" {_label(p)} is timed in a phase of its own after the others, "
                       "paired with tgrad samples of that phase (its calls slowed whatever ran "
                       "after them)." for p in SEPARATE_PEERS
                       if any(p in r.get("separate", {}) for r in results))
    condition = report.get("condition")
    reading = READING + (READING_ONE_THREAD if ONE_THREAD in peers else "")
    return [
        f"# tgrad bench, {report['date']}",
        "",
        f"Command: `{report['command']}`  ",
        *([f"Condition: {condition}  "] if condition else []),
        f"CPU: {env['cpu_model']} ({env['cpus_usable']} usable CPUs; "
        f"{', '.join(env['cpu_flags']) or 'no flags read'}), load average at start "
        f"{', '.join(f'{x:.2f}' for x in env['loadavg'] or [])}  ",
        _isa_line(env, peers, report["peer_threads"], report["matmul_order"]),
        "Versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v) + "  ",
        _blas_line(env),
        _spin_line(env),
        _limits_line(report["limits"]),
        _memory_line(env),
        "",
        _load_line(env.get("others_load")),
        "",
        reading + separate,
        "",
    ]


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(row) + " |" for row in rows])


def _speed_row(res: dict[str, Any], limits: dict[str, Any], peers: list[str]) -> list[str]:
    peak, stream = limits["peak"].get("gflops"), limits["stream"].get("copy_gbps")
    paired = res.get("paired_limits", {})
    pct = f"{100 * res['gflops'] / peak:.0f}%" if peak and math.isfinite(res["gflops"]) else "—"
    if "limit_peak" in paired:
        pct = _fmt_share(paired["limit_peak"]) + "; " + pct
    gbps = "—"
    if res.get("memory_bound") and math.isfinite(res["gbps"]):
        shares = [_fmt_share(paired["limit_read"])] if "limit_read" in paired else []
        if stream:
            shares.append(f"{100 * res['gbps'] / stream:.0f}%")
        gbps = f"{res['gbps']:.1f}" + (f" ({'; '.join(shares)})" if shares else "")
    row = [res["shape"], _bytes_cell(res), str(res["repeat"]), _fmt_load(res.get("load")),
           _fmt_time(res["median_s"]), _fmt_gflops(res["gflops"]), pct, gbps]
    for p in peers:
        entry = res["peers"].get(p)
        row += [_fmt_gflops(entry["gflops"]) if entry else "—", _fmt_ratio(entry)]
    return row


def _speed_table(report: dict[str, Any], peers: list[str]) -> list[str]:
    head = ["shape", "bytes", "reps", "others' CPU", "tgrad time", "tgrad GFLOP/s",
            "% of peak: paired [95%]; of the best probe",
            "GB/s: % of the paired read [95%]; of copy bw"]
    for p in peers:
        head += [f"{_label(p)} GFLOP/s", f"{_label(p)} / tgrad time"]
    return _table(head, [_speed_row(r, report["limits"], peers) for r in report["results"]])


def _call_table(results: list[dict[str, Any]], peers: list[str]) -> list[str]:
    small = [r for r in results if "tgrad_call" in r["samples"]
             and r["m"] * r["k"] * r["n"] <= CALL_TABLE_LIMIT_MACS]
    if not small:
        return []
    head = ["shape", "tgrad call"]
    peers = [p for p in peers if p != ONE_THREAD]  # timed against tgrad's realize only
    for p in peers:
        head += [f"{_label(p)}", f"{_label(p)} / tgrad call"]
    rows = []
    for res in small:
        row = [res["shape"], _fmt_time(res["call_median_s"])]
        for p in peers:
            entry = res["peers"].get(p)
            row += [_fmt_time(entry["median_s"]) if entry else "—",
                    _fmt_ratio(entry.get("call") if entry else None)]
        rows.append(row)
    return ["", "Whole Python call, result read back into a new numpy array: "
            "`(a @ b).numpy()` for tgrad; a peer's timed region already leaves its result in "
            "host memory.", ""] + _table(head, rows)


def _footer(results: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    skipped = sorted({f"{_label(p)}: {why}" for r in results
                      for p, why in r["peers_skipped"].items() if "limit" not in why})
    if skipped:
        out += ["", "Peers not run: " + "; ".join(skipped) + "."]
    errors = [f"{r['shape']}: {e}" for r in results for e in r["errors"]]
    if errors:
        out += ["", "Errors:", ""] + [f"- {e}" for e in errors]
    return out


def format_markdown(report: dict[str, Any]) -> str:
    """bench.md: how it was run, the limits, the speed table and the whole-call table."""
    peers = _peer_names(report["results"])
    out = (_head(report, peers) + _speed_table(report, peers)
           + _call_table(report["results"], peers) + _footer(report["results"]))
    return "\n".join(out) + "\n"
