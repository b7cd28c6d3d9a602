"""The bench's output format, pinned: the report stage on fixed fake measurements gives the same
bench.md and the same ``key: value`` lines, byte for byte, as the files in data/bench_format/
(written by the bench before it became a package; the refactor must not change a character), and
a real run's stdout and bench.md keep the same line shapes (numbers masked).

Regenerate the golden files only for an intended format change:
``TGRAD_BENCH_FORMAT_WRITE=1 pytest tests/python/test_bench_format.py -k golden``.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tgrad import bench

DATA = Path(__file__).parent / "data" / "bench_format"
NAN = math.nan


def _peer(median_s: float, ratio: float, lo: float, hi: float, threads: str,
          call: tuple[float, float, float] | None = None, phase: str | None = None) -> dict:
    entry: dict[str, Any] = {"median_s": median_s, "gflops": 2 * 64**3 / median_s / 1e9,
                             "ratio": ratio, "lo": lo, "hi": hi, "verdict": bench.verdict(lo, hi),
                             "threads": threads}
    if phase:
        entry["phase"] = phase
    if call:
        entry["call"] = {"ratio": call[0], "lo": call[1], "hi": call[2],
                         "verdict": bench.verdict(call[1], call[2])}
    return entry


def _result(shape: tuple[int, int, int], **over: Any) -> dict[str, Any]:
    m, k, n = shape
    res: dict[str, Any] = {
        "shape": f"{m}x{k}x{n}", "m": m, "k": k, "n": n, "dtype": "bf16", "flops": 2 * m * k * n,
        "bytes": 2 * (m * k + k * n + m * n), "memory_bound": False, "threads": 2,
        "cpu_isa": "avx512_bf16", "route": "cpu.packed", "matmul_order": "pairwise",
        "byte_match": True, "byte_check": "done",
        "pipeline_ok": True, "errors": [], "median_s": 4.5e-6, "gflops": 58.25,
        "gbps": 5.46, "call_median_s": 9.25e-6, "repeat": 12, "regions": ["tgrad", "tgrad_call"],
        "orders": [], "samples": {"tgrad": [4.5e-6], "tgrad_call": [9.25e-6]}, "peers": {},
        "load": {"others": 0.012, "steal": 0.0}, "peers_skipped": {}, "separate": {},
        "paired_limits": {},
    }
    res.update(over)
    return res


def fake_report(disturbed: bool = False) -> dict[str, Any]:
    """A report as the bench builds it, with every branch of the formatting taken once."""
    small = _result((64, 64, 64), peers={
        "numpy_f32": _peer(1.25e-5, 2.78, 2.5, 3.1, "2", call=(1.35, 1.2, 1.5)),
        "torch_bf16": _peer(4.4e-6, 0.98, 0.9, 1.05, "2", call=(0.48, 0.45, 0.5)),
        "tinygrad_bf16": _peer(3.2e-3, 700.0, 650.0, 720.0, "2 (NUM_CPU_THREADS; DEV=CPU)",
                               call=(340.0, 300.0, 350.0), phase="separate"),
    }, separate={"tinygrad_bf16": {"repeat": 10}},
        peers_skipped={"ml_dtypes_bf16": "above its size limit (a scalar loop)"})
    vec = _result((1, 4096, 4096), memory_bound=True, median_s=1.2e-3, gflops=27.96,
                  gbps=28.0, call_median_s=NAN, regions=["tgrad", "limit_read", "limit_peak"],
                  samples={"tgrad": [1.2e-3]}, load={"others": 0.2, "steal": 0.01},
                  paired_limits={"limit_read": {"median_s": 1e-3, "share": 0.83, "lo": 0.8,
                                                "hi": 0.86, "gbps": 33.5},
                                 "limit_peak": {"median_s": 2e-4, "share": 0.17, "lo": 0.16,
                                                "hi": 0.18, "gflops": 167.0}},
                  peers={"numpy_f32": _peer(2.5e-3, 2.08, 2.0, 2.2, "2")},
                  peers_skipped={"torch_bf16": "torch not importable"})
    big = _result((2048, 2048, 2048), median_s=0.151, gflops=113.8, call_median_s=NAN,
                  byte_check="skipped (oracle limit)", byte_match=None, samples={"tgrad": [0.1]},
                  load=None, peers={"numpy_f32": _peer(1.5, 9.9, 9.5, 10.3, "2")})
    bad = _result((8, 8, 4), byte_match=False, mismatches=3,
                  first_mismatch={"m": 1, "n": 2, "got": "0x3f80", "want": "0x3f81"},
                  errors=["timing: RuntimeError: boom"], gflops=NAN, median_s=NAN)
    failed = _result((4, 4, 4), byte_match=False, byte_check="pipeline failed", pipeline_ok=False,
                     errors=["matmul: TgradError: no"], median_s=NAN, gflops=NAN,
                     call_median_s=NAN, repeat=0, samples={}, load=None)
    env = {
        "cpu_model": "Fake CPU 9000", "cpu_flags": ["avx2", "avx512_bf16", "fma"],
        "machine": "x86_64", "cpus_usable": 2, "loadavg": [0.5, 0.25, 0.125],
        "tgrad_library": "0.9.0", "tgrad_cpu_isa": "avx512_bf16",
        "tgrad_cpu_stream_isa": "avx2", "tgrad_threads": 2,
        "versions": {"numpy": "2.1.0", "ml_dtypes": "0.5.0", "torch": None, "tqdm": "4.0"},
        "env": {"OPENBLAS_CORETYPE": "Haswell", "GOMP_SPINCOUNT": "10000"},
        "unset_by_launcher": [], "set_by_reexec": ["GOMP_SPINCOUNT"],
        "threadpools": [{"user_api": "blas", "internal_api": "openblas", "version": "0.3.27",
                         "architecture": "SkylakeX", "num_threads": 2}],
        "tgrad_cpu_scratch_bytes": 3 << 20, "process_peak_rss_kib": 204800,
        "others_load": {"others": 0.3 if disturbed else 0.01, "steal": 0.02 if disturbed else 0.0},
    }
    limits = {"peak": {"gflops": 250.4, "source": "tgrad.cpu_peak_gflops, best of 3"},
              "stream": {"copy_gbps": 40.25, "method": "numpy copyto, best of 2"}}
    return {"date": "2026-01-02 03:04 UTC", "command": "python -m tgrad bench --fake",
            "matmul_order": "pairwise", "environment": env, "limits": limits,
            "peer_threads": {"numpy_f32": "2", "torch_bf16": "2",
                             "tinygrad_bf16": "2 (NUM_CPU_THREADS; DEV=CPU)"},
            "results": [small, vec, big, bad, failed]}


def _rendered(disturbed: bool) -> dict[str, str]:
    report = fake_report(disturbed)
    lines = "\n\n".join("\n".join(bench.format_shape(r, report["limits"]))
                        for r in report["results"]) + "\n"
    return {"bench.md": bench.format_markdown(report), "stdout.txt": lines}


@pytest.mark.parametrize("disturbed", [False, True])
def test_golden_report_is_unchanged(disturbed: bool) -> None:
    suffix = "-disturbed" if disturbed else ""
    for name, text in _rendered(disturbed).items():
        golden = DATA / name.replace(".", f"{suffix}.", 1)
        if os.environ.get("TGRAD_BENCH_FORMAT_WRITE"):
            golden.write_text(text, encoding="utf-8")
        assert text == golden.read_text(encoding="utf-8"), golden.name


# ---- a real run: the same line shapes, numbers masked ------------------------------------------

_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")
#: Lines whose text after the label names this machine (CPU, versions, BLAS, load): kept as the
#: label only.
_FREE = ("CPU: ", "tgrad ", "Versions: ", "numpy BLAS: ", "Idle spinning", "Measured limits: ",
         "Memory: ", "Command: ", "bench_cpu: ",
         "bench_numpy_blas: ", "bench_peak_gflops: ", "py_cpu_isa: ", "py_route: ",
         "peer_numpy_f32_threads: ", "# tgrad bench, ", "Load from other")


#: What the load of other processes decides (the load line, the others' CPU line and cell: a
#: share, "—" when no clock tick passed, or disturbed): one word each.
_LOAD_LINES = ("While timing", "**This run was disturbed**")


def mask(text: str) -> list[str]:
    """Each line reduced to its shape: numbers as '#', machine-specific text cut, time units,
    verdicts and what the machine's load decides (they depend on the timings) as one word."""
    out = []
    for line in text.splitlines():
        if line.startswith("py_others_cpu: "):
            continue
        if line.startswith(_LOAD_LINES):
            out.append("LOAD ...")
            continue
        free = next((p for p in _FREE if line.startswith(p)), None)
        if free is not None:
            out.append(free.strip() + " ...")
            continue
        line = re.sub(r"\b(win|loss|tie)\b", "VERDICT", line)
        line = re.sub(r"/tmp\S*|" + re.escape(str(Path.cwd())) + r"\S*", "PATH", line)
        line = re.sub(r"(\d) (µs|ms|s) \|", r"\1 T |", line)
        cells = line.split(" | ")
        if re.match(r"\| \d+x", line) and len(cells) > 8:  # the speed table: cell 4 is the load
            cells[3] = "LOAD"
        out.append(_NUMBER.sub("#", " | ".join(cells)))
    return out


@pytest.mark.slow  # a bench run in a child process
def test_cli_output_keeps_its_line_shapes(tmp_path: Path) -> None:
    """stdout (the per-shape lines and the closing block) and bench.md of a small real run, with
    the optional peers blocked so that only numpy and ml_dtypes (core dependencies) are timed."""
    code = ("import sys\n"
            "for name in ('torch', 'matplotlib', 'tqdm', 'threadpoolctl', 'tinygrad'):\n"
            "    sys.modules[name] = None\n"
            "from tgrad.__main__ import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    argv = ["bench", "--shape", "8x8x8,1x2048x512", "--repeat", "3", "--threads", "1",
            "--no-reexec", "--out", str(tmp_path)]
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the warning of a disturbed run is the one line that comes and goes with the machine's load
    stdout = "\n".join(x for x in proc.stdout.splitlines() if not x.startswith("bench_warning: "))
    got = {"stdout": mask(stdout), "bench.md": mask((tmp_path / "bench.md").read_text())}
    for name, lines in got.items():
        golden = DATA / f"cli-{name}.masked"
        if os.environ.get("TGRAD_BENCH_FORMAT_WRITE"):
            golden.write_text("\n".join(lines) + "\n", encoding="utf-8")
        assert lines == golden.read_text(encoding="utf-8").splitlines(), name


# ---- a disturbed run says so on stdout, not only in bench.md ------------------------------------


@pytest.mark.parametrize("disturbed", [False, True])
def test_the_closing_block_warns_of_a_disturbed_run(disturbed: bool) -> None:
    report = fake_report(disturbed)
    lines = bench.closing_lines(report, Path("out"), "out/bench.png", None, None)
    warnings = [x for x in lines if x.startswith("bench_warning: ")]
    if not disturbed:
        assert warnings == []
        return
    (warning,) = warnings
    assert lines[-1] == warning  # last: the line a reader sees first
    assert "this run was disturbed" in warning and "30.0%" in warning and "2.0%" in warning


def test_a_disturbed_run_prints_the_warning_on_stdout(tmp_path: Path, monkeypatch: Any,
                                                      capsys: Any) -> None:
    """The whole run in this process, other processes' load faked high and the limits faked (a
    real stream copy would take seconds): the warning is in bench.md and on stdout."""
    from tgrad.__main__ import main
    from tgrad.bench import cli

    limits = fake_report()["limits"]
    monkeypatch.setattr(cli, "_others_load", lambda before, after: {"others": 0.4, "steal": 0.0})
    monkeypatch.setattr(cli, "measure_limits", lambda threads: {k: dict(v) for k, v in
                                                                limits.items()})
    monkeypatch.setattr(cli, "refresh_limits", lambda *args, **kwargs: None)
    status = main(["bench", "--shape", "4x4x4", "--repeat", "2", "--no-peers", "--no-reexec",
                   "--no-progress", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "**This run was disturbed**" in (tmp_path / "bench.md").read_text()
    warning = out.rstrip("\n").splitlines()[-1]
    assert warning.startswith("bench_warning: this run was disturbed: other processes used 40.0%")


@pytest.mark.parametrize("disturbed", [False, True])
def test_bench_graph_warns_of_a_disturbed_run_on_stdout(tmp_path: Path, capsys: Any,
                                                        disturbed: bool) -> None:
    """bench --graph's closing block (no block ran: only the head of the report matters)."""
    import argparse

    from tgrad.bench import graph_report

    fake = fake_report(disturbed)
    env = dict(fake["environment"], loadavg_end=[0.5, 0.25, 0.125])
    report = {"date": fake["date"], "command": fake["command"], "environment": env, "threads": 2,
              "matmul_order": "block32",
              "peer_threads": {}, "results": []}
    args = argparse.Namespace(out=str(tmp_path), json=None, doc=None)
    graph_report._write(args, report)
    last = capsys.readouterr().out.rstrip("\n").splitlines()[-1]
    assert last.startswith("bench_warning: this run was disturbed") is disturbed, last
    assert ("**This run was disturbed**" in (tmp_path / "bench-graph.md").read_text()) is disturbed
