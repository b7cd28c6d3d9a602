"""What a run records: the report's opening fields, how the measurement was made (the JSON's
"method"), the JSON itself (no NaN: null) and the report's section in a markdown file (--doc)."""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .limits import PAIRED_PEAK_MIN_MACS
from .peers import SEPARATE_PEERS
from .stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED
from .timing import HOT_LIMIT_S, QUIET_POLL_S, QUIET_TIMEOUT_S

#: Where --doc puts the report in a markdown file.
DOC_BEGIN, DOC_END = "<!-- bench:begin -->", "<!-- bench:end -->"

#: The matmul bench's timed regions, as the JSON describes them.
REGIONS = {
    "tgrad": "(a @ b).realize(), inputs resident (at T > 1 threads with tgrad.set_num_threads(T) "
             "before the clock starts and after it stops, as tgrad_1t does with 1)",
    "tgrad_call": "(a @ b).numpy(): the whole Python call, readback into a new array",
    "tgrad_1t": "(a @ b).realize() with tgrad.set_num_threads(1) before the clock starts and "
                "the thread count set back after it stops (only when tgrad runs T > 1 threads)",
    "numpy_f32": "a32 @ b32 (float32 copies of the same bf16 values)",
    "torch_bf16": "torch.matmul(a, b) on bfloat16 tensors sharing the input memory",
    "ml_dtypes_bf16": "a @ b on ml_dtypes.bfloat16 arrays",
    "tinygrad_bf16": "(a @ b).realize() on bfloat16 tinygrad tensors",
    "limit_peak": "tgrad_cpu_peak_run(threads, flops): the shape's flops on the peak "
                  "probe's instruction stream (shapes of at least "
                  f"{PAIRED_PEAK_MIN_MACS} multiply-adds)",
    "limit_read": "tgrad_cpu_read_run over each operand's bytes: a plain read, one "
                  "contiguous part per thread (memory-bound shapes)",
}


def method() -> dict[str, Any]:
    """The JSON's "method": the timer, the regions, the interleaving, the statistics."""
    return {
        "timer": "time.perf_counter around one call; result released after the clock stops",
        "regions": dict(REGIONS),
        "paired_limits": "median over repetitions i of samples[limit][i] / samples[tgrad][i] "
                         "(1.0: tgrad as fast as the limit), bootstrap as for the ratios; in "
                         "each result's 'paired_limits'",
        "interleave": "per repetition every region once, in balanced orders (a Williams design: "
                      "every region directly follows every other one equally often; see each "
                      "result's 'orders'); two warm-up rounds first; gc disabled",
        "separate": f"{', '.join(SEPARATE_PEERS)}: timed after the others, interleaved with "
                    "new samples of tgrad and tgrad_call only (each result's 'separate'; the "
                    "peer's entry has phase 'separate' and its ratios pair with those "
                    "samples): its calls slowed every region timed after them",
        "quiet": f"before each region, wait until no other thread of the process runs "
                 f"(polled in /proc/self/task every {QUIET_POLL_S * 1e3:g} ms, at most "
                 f"{QUIET_TIMEOUT_S:g} s; see each result's 'quiet'): OpenBLAS and OpenMP "
                 f"workers spin after a call and would take a core from the next region",
        "hot": f"a region whose call took under {HOT_LIMIT_S * 1e3:g} ms gets one untimed "
               f"call right before each timed one (its own threads awake, as in a loop); see "
               f"each result's 'hot'",
        "cold": "bench --cold MS: no region is hot; the process sleeps MS ms right before each "
                "timed call (after the quiet wait, outside the clock); each result's 'cold_s'",
        "contend": "bench --contend NICE: a child process spins on the last usable CPU at nice "
                   "NICE from before the first shape's warm-up to the end of the run; its CPU "
                   "time counts as the run's own in the load figures; the report's 'condition'",
        "ratio": "median over repetitions i of samples[peer][i] / samples[tgrad][i]; > 1 "
                 "means tgrad is faster; 'call' uses samples['tgrad_call']",
        "bootstrap": {"statistic": "median of the paired ratios", "interval": "percentile, 95%",
                      "resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED,
                      "rng": "numpy.random.default_rng(seed).integers(0, n, (resamples, n))"},
        "verdict": "win if lo > 1, loss if hi < 1, else tie",
    }


def _report_head(schema: str, started: _dt.datetime, threads: int, peer_threads: dict[str, str],
                 env: dict[str, Any]) -> dict[str, Any]:
    """The fields every bench report opens with (the matmul bench's and bench --graph's)."""
    import tgrad

    return {
        "schema": schema,
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": (_dt.datetime.now(_dt.timezone.utc) - started).total_seconds(),
        "command": _command(),
        "argv": sys.argv,
        "tgrad_version": tgrad.version(),
        "cpu_isa": tgrad.cpu_isa(),
        "matmul_order": tgrad.get_matmul_order(),
        "threads": threads,
        "peer_threads": peer_threads,
        "environment": env,
    }


def _command() -> str:
    """How this run was started, to be pasted back: ``nox -s bench -- ARGS`` when nox says so
    (TGRAD_BENCH_LAUNCHER), else ``python -m tgrad bench ARGS``."""
    argv = sys.argv[1:]
    if not sys.argv[0].endswith("__main__.py"):
        return " ".join(sys.argv)
    launcher = os.environ.get("TGRAD_BENCH_LAUNCHER")
    if launcher and argv[:1] == ["bench"]:
        return " ".join([launcher, *(["--", *argv[1:]] if argv[1:] else [])])
    return " ".join(["python -m tgrad", *argv])


def update_doc(path: Path, report_md: str, *, begin: str = DOC_BEGIN, end: str = DOC_END) -> None:
    """Replace the lines between `begin` and `end` (DOC_BEGIN and DOC_END: the matmul bench's
    section) in `path` with the report (its title becomes a level-3 heading); everything else in
    the file is kept."""
    text = path.read_text(encoding="utf-8")
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"{path}: no '{begin}' ... '{end}' section to replace")
    body = re.sub(r"^# ", "### ", report_md, count=1)
    path.write_text(text[: start + len(begin)] + "\n" + body + text[stop:], encoding="utf-8")


def doc_has_section(path: str, begin: str = DOC_BEGIN, end: str = DOC_END) -> bool:
    """Whether --doc PATH can take the report (checked before minutes of measurement)."""
    text = Path(path).read_text(encoding="utf-8") if Path(path).is_file() else ""
    return begin in text and end in text


def save_report(out_dir: Path, stem: str, report: dict[str, Any], markdown: str, json_path: str | None,
                doc_path: str | None, *, begin: str = DOC_BEGIN, end: str = DOC_END) -> None:
    """`stem`.json and `stem`.md in out_dir (created), a copy of the JSON at json_path and the
    markdown into doc_path's section between `begin` and `end`, when given: what both benches
    write."""
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_finite(report), indent=1, allow_nan=False) + "\n"
    (out_dir / f"{stem}.json").write_text(text, encoding="utf-8")
    if json_path:
        Path(json_path).write_text(text, encoding="utf-8")
    (out_dir / f"{stem}.md").write_text(markdown, encoding="utf-8")
    if doc_path is not None:
        update_doc(Path(doc_path), markdown, begin=begin, end=end)


def _finite(x: Any) -> Any:
    """JSON has no NaN or inf: write them as null."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x
