"""``python -m tgrad bench``: output contract, byte check, exit statuses, reports, statistics.

No test here asserts a time or a ratio's value: timings only have to exist and be consistent
with the raw samples they were computed from.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tgrad  # noqa: E402,F401  (a missing binding is a failure, not a skip)
from tgrad import bench as bench_module
from tgrad.bench.timing import balanced_orders

pytestmark = pytest.mark.slow  # a bench run in a child process per test

FIRST_KEYS = ["py_shape", "py_dtype", "py_byte_match", "py_pipeline_ok", "py_median_s", "py_gflops"]
RATIO_RE = re.compile(r"(\S+) \[(\S+), (\S+)\] (win|loss|tie)")


def _env(**extra: str | None) -> dict[str, str]:
    env = dict(os.environ)  # TGRAD_LIB, PYTHONPATH pass through unchanged
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def bench(*args: str, out: Path | None = None, timeout: float = 120,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI; its files go to `out` (a tmp dir) so that nothing lands in the source tree."""
    argv = [sys.executable, "-m", "tgrad", "bench", *args]
    if out is not None:
        argv += ["--out", str(out)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else _env())


def blocks(stdout: str) -> list[dict[str, str]]:
    """Blocks of 'key: value' lines separated by blank lines, keys in order."""
    result: list[dict[str, str]] = []
    for chunk in stdout.strip().split("\n\n"):
        block: dict[str, str] = {}
        for line in chunk.splitlines():
            key, sep, value = line.partition(": ")
            assert sep, f"not a 'key: value' line: {line!r}"
            block[key] = value
        result.append(block)
    return result


def parse(stdout: str) -> list[dict[str, str]]:
    """One block per shape (the closing block names the files written)."""
    found = blocks(stdout)
    assert "bench_markdown" in found[-1], found[-1]
    return [b for b in found if "py_shape" in b]


# ---- the per-shape contract -------------------------------------------------------------------


def _verdicts_of_printed(lo: float, hi: float) -> set[str]:
    """The verdicts an interval printed to two decimals admits: the bench decides on the unrounded
    interval, so [0.93, 1.00] may be a loss (hi = 0.996) and [1.00, 1.07] a win (lo = 1.004)."""
    half = 0.005
    if lo - half > 1:
        return {"win"}
    if hi + half < 1:
        return {"loss"}
    return {"tie"} | ({"win"} if lo + half > 1 else set()) | ({"loss"} if hi - half < 1 else set())


@pytest.mark.parametrize("shape", ["64x64x64", "127x255x511"])
def test_bench_bytes_match_the_oracle(shape, tmp_path):
    proc = bench("--shape", shape, "--repeat", "5", out=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (block,) = parse(proc.stdout)
    assert list(block)[:6] == FIRST_KEYS
    assert block["py_shape"] == shape
    assert block["py_dtype"] == "bf16"
    assert block["py_byte_match"] == "true"
    assert block["py_pipeline_ok"] == "true"
    assert float(block["py_median_s"]) > 0 and float(block["py_gflops"]) > 0
    assert float(block["py_call_median_s"]) > 0
    assert "peer_numpy_f32_median_s" in block
    for key in ("ratio_numpy_f32", "ratio_call_numpy_f32"):
        match = RATIO_RE.fullmatch(block[key])
        assert match, block[key]
        value, lo, hi = (float(match.group(i)) for i in (1, 2, 3))
        assert 0 < lo <= hi and value > 0
        assert match.group(4) in _verdicts_of_printed(lo, hi), block[key]


def test_bench_empty_shape_works(tmp_path):
    proc = bench("--shape", "0x5x3", "--repeat", "3", out=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (block,) = parse(proc.stdout)
    assert block["py_byte_match"] == "true" and block["py_pipeline_ok"] == "true"


def test_bench_skips_the_oracle_above_its_limit_only(tmp_path):
    proc = bench("--shape", "1x1x1", "--repeat", "2", "--no-peers", out=tmp_path)
    assert parse(proc.stdout)[0]["py_byte_match"] == "true"
    assert bench_module.ORACLE_LIMIT_MACS >= 1024**3  # 1024^3 is always checked


# ---- shapes: the default suite and lists --------------------------------------------------------


def _listed(stdout: str) -> list[str]:
    return [line.split()[0] for line in stdout.splitlines() if line.strip()]


def test_default_suite_is_listed_without_running():
    proc = bench("--list")
    assert proc.returncode == 0, proc.stderr
    shapes = _listed(proc.stdout)
    for want in ["64x64x64", "127x255x511", "1024x1024x1024", "2048x2048x2048", "4096x4096x4096",
                 "1x4096x4096", "4096x4096x1", "16x4096x4096", "4096x64x4096",
                 "4096x1024x1024", "2048x1024x1024", "1024x1024x8192", "1024x1024x4096",
                 "1024x1024x2048", "4x4x4", "8x8x4", "4x32x4", "6x32x6", "4x4x32"]:
        assert want in shapes
    assert len(shapes) == len(set(shapes))
    assert "8192x8192x8192" not in shapes and "8192x1024x1024" not in shapes
    assert "py_shape" not in proc.stdout  # nothing ran
    full = _listed(bench("--list", "--full").stdout)
    assert full[: len(shapes)] == shapes
    assert {"8192x8192x8192", "8192x1024x1024"} <= set(full)


def test_shape_lists_are_comma_separated_and_repeatable():
    proc = bench("--shape", "4x4x4, 4x0x3", "--shape", "2x3x4", "--list")
    assert proc.returncode == 0, proc.stderr
    assert _listed(proc.stdout) == ["4x4x4", "4x0x3", "2x3x4"]
    assert bench_module.parse_shape_list("1x2x3,4X5X6") == [(1, 2, 3), (4, 5, 6)]


@pytest.mark.parametrize("bad", ["12x", "x", "1x2", "1x2x3x4", "-1x2x3", "axbxc", "1.5x2x3",
                                 "1x2x3,", "1x2x3,,4x4x4", "1x2x3;4x4x4"])
def test_bench_bad_shape_is_a_usage_error(bad):
    proc = bench(f"--shape={bad}", "--list")
    assert proc.returncode == 2
    assert "invalid shape" in proc.stderr and "MxKxN" in proc.stderr


def test_bench_only_accepts_bf16():
    proc = bench("--shape", "4x4x4", "--dtype", "f32")
    assert proc.returncode == 2
    assert "bf16" in proc.stderr


def test_a_command_is_needed():
    proc = subprocess.run([sys.executable, "-m", "tgrad"], capture_output=True, text=True,
                          timeout=60, env=_env())
    assert proc.returncode == 2 and "bench" in proc.stderr


# ---- reports: JSON, markdown, plot ------------------------------------------------------------


@pytest.fixture(scope="module")
def report_run(tmp_path_factory):
    """One small run whose reports several tests read (the re-exec path included: the spin
    variables are removed from its environment, so the bench sets them itself)."""
    out = tmp_path_factory.mktemp("bench-out")
    extra = tmp_path_factory.mktemp("json") / "copy.json"
    env = _env(**{k: None for k in bench_module.SPIN_ENV}, TGRAD_BENCH_REEXEC=None)
    proc = bench("--shape", "4x4x4,64x64x64", "--shape", "4x0x3", "--repeat", "6",
                 "--threads", "1", "--json", str(extra), out=out, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, out, extra


def test_reports_are_written_and_named(report_run):
    proc, out, extra = report_run
    files = blocks(proc.stdout)[-1]
    assert files["bench_markdown"] == str(out / "bench.md")
    assert files["bench_json"].startswith(str(out / "bench.json"))
    assert json.loads(extra.read_text()) == json.loads((out / "bench.json").read_text())
    blocks_ = parse(proc.stdout)
    assert [b["py_shape"] for b in blocks_] == ["4x4x4", "64x64x64", "4x0x3"]
    assert all(b["py_threads"] == "1" for b in blocks_)


def test_json_keeps_raw_paired_samples_and_ratios_recompute(report_run):
    _, out, _ = report_run
    report = json.loads((out / "bench.json").read_text())
    assert report["schema"] == "tgrad-bench/2" and report["threads"] == 1
    env = report["environment"]
    for key in ("cpu_model", "cpu_flags", "tgrad_cpu_isa", "tgrad_threads", "versions", "env",
                "threadpools", "unset_by_launcher", "set_by_reexec", "loadavg", "others_load",
                "tgrad_cpu_scratch_bytes", "process_peak_rss_kib"):
        assert key in env
    assert env["tgrad_cpu_scratch_bytes"] >= 0
    assert env["versions"]["numpy"] == np.__version__
    assert sorted(env["set_by_reexec"]) == sorted(bench_module.SPIN_ENV)
    for key, value in bench_module.SPIN_ENV.items():
        assert env["env"][key] == value
    assert report["limits"]["stream"]["copy_gbps"] > 0
    assert "source" in report["limits"]["peak"]
    boot = report["method"]["bootstrap"]
    assert len(report["results"]) == 3
    for res in report["results"]:
        assert res["byte_match"] is True and res["repeat"] == 6
        if res["load"] is not None:  # where /proc/stat exists
            assert 0 <= res["load"]["others"] <= 1 and 0 <= res["load"]["steal"] <= 1
        regions = res["regions"]
        assert regions[0] == "tgrad" and "numpy_f32" in regions
        assert set(res["samples"]) == set(regions)
        assert all(len(res["samples"][r]) == 6 for r in regions)
        # each repetition ran every region once, in the balanced orders, one after another
        assert len(res["orders"]) == 6
        rows = balanced_orders(len(regions))
        for i, order in enumerate(res["orders"]):
            assert order == [regions[j] for j in rows[i % len(rows)]]
        assert math.isclose(res["median_s"], statistics.median(res["samples"]["tgrad"]))
        for name, peer in res["peers"].items():
            # a peer of the separate phase pairs with that phase's tgrad samples
            separate = peer.get("phase") == "separate"
            paired = res["separate"][name]["samples"] if separate else res["samples"]
            ours = np.array(paired["tgrad"])
            theirs = np.array(paired[name])
            assert math.isclose(peer["ratio"], float(np.median(theirs / ours)))
            again = bench_module.bootstrap_ratio(theirs, ours, seed=boot["seed"],
                                                 resamples=boot["resamples"])
            assert again == pytest.approx((peer["ratio"], peer["lo"], peer["hi"]))
            assert peer["verdict"] == bench_module.verdict(peer["lo"], peer["hi"])
            call = np.array(paired["tgrad_call"])
            assert math.isclose(peer["call"]["ratio"], float(np.median(theirs / call)))


def test_markdown_table_has_a_row_per_shape(report_run):
    _, out, _ = report_run
    text = (out / "bench.md").read_text()
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| shape | bytes"))
    for column in ("tgrad GFLOP/s", "% of peak", "numpy f32 GFLOP/s", "numpy f32 / tgrad time"):
        assert column in header
    rows = [line for line in lines if line.startswith("| 4x4x4 |") or line.startswith("| 64x64x64 |")]
    assert len(rows) == 4  # the speed table and the whole-call table
    assert any(RATIO_RE.search(row) for row in rows)
    assert "Command: `" in text and "Measured limits" in text and "tgrad's CPU scratch" in text


def test_plot_is_a_png_when_matplotlib_is_there(report_run):
    proc, out, _ = report_run
    plot = blocks(proc.stdout)[-1]["bench_plot"]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert plot.startswith("skipped") and not (out / "bench.png").exists()
        pytest.skip("matplotlib is not installed")
    assert plot == str(out / "bench.png")
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_runs_without_its_optional_packages(tmp_path):
    """No torch, matplotlib, tqdm, threadpoolctl or tinygrad: the bench still runs and reports."""
    code = (
        "import sys\n"
        "for name in ('torch', 'matplotlib', 'tqdm', 'threadpoolctl', 'tinygrad'):\n"
        "    sys.modules[name] = None\n"
        "from tgrad.__main__ import main\n"
        f"sys.exit(main(['bench', '--shape', '8x8x8', '--repeat', '3', '--progress', "
        f"'--out', {str(tmp_path)!r}]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (block,) = parse(proc.stdout)
    assert block["py_byte_match"] == "true" and "peer_torch_bf16_median_s" not in block
    assert blocks(proc.stdout)[-1]["bench_plot"].startswith("skipped")
    assert "[0/1] 8x8x8" in proc.stderr  # the plain progress line, forced by --progress
    assert (tmp_path / "bench.md").exists() and not (tmp_path / "bench.png").exists()
    report = json.loads((tmp_path / "bench.json").read_text())
    (res,) = report["results"]
    assert "torch_bf16" in res["peers_skipped"] and "torch_bf16" not in res["peers"]
    assert report["environment"]["threadpools"] == "threadpoolctl not installed"


# A stand-in for tinygrad with its setup surface (Tensor, dtypes, helpers.DEV and
# NUM_CPU_THREADS): the matmul is numpy's on bf16-rounded values; compiling fails (as clang
# before 15 does on __bf16) for the targets listed in FAKE_TINYGRAD_FAILS.
FAKE_TINYGRAD = {
    "tinygrad/__init__.py": """
import os, subprocess
import ml_dtypes, numpy as np
class dtypes:
    bfloat16 = "bfloat16"
class Tensor:
    def __init__(self, data, device=None):
        self.data, self.device = np.asarray(data, np.float32), device
    def cast(self, dtype):
        return Tensor(self.data.astype(ml_dtypes.bfloat16).astype(np.float32), self.device)
    def realize(self):
        from . import helpers
        if helpers.DEV.value in os.environ.get("FAKE_TINYGRAD_FAILS", "").split(","):
            raise subprocess.CalledProcessError(1, ["/usr/bin/clang", "-c", "-x", "c", "-"])
        return self
    def __matmul__(self, other):
        import time
        time.sleep(float(os.environ.get("FAKE_TINYGRAD_SLEEP", "0")))
        return Tensor(self.data @ other.data, self.device)
    def float(self):
        return self
    def numpy(self):
        return self.data
""",
    "tinygrad/helpers.py": """
class _Var:
    def __init__(self, value):
        self.value = value
DEV, NUM_CPU_THREADS = _Var(""), _Var(0)
""",
}


def _fake_tinygrad_run(tmp_path, fails: str, without: tuple[str, ...] = (),
                       args: tuple[str, ...] = ("--repeat", "4"), sleep: float = 0.0) -> dict:
    pkg = tmp_path / "fake"
    for rel, text in FAKE_TINYGRAD.items():
        if rel in without:
            continue
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    path = os.pathsep.join(p for p in (str(pkg), os.environ.get("PYTHONPATH", "")) if p)
    out = tmp_path / "out"
    proc = bench("--shape", "8x8x8,16x8x4", *args, "--threads", "1", out=out,
                 env=_env(PYTHONPATH=path, FAKE_TINYGRAD_FAILS=fails, DEV=None,
                          FAKE_TINYGRAD_SLEEP=str(sleep)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((out / "bench.json").read_text())


def test_tinygrad_is_timed_in_its_own_phase_on_the_renderer_that_runs(tmp_path):
    """The default CPU renderer fails, the x86 one runs: tinygrad is timed there, after the other
    regions, paired with tgrad samples of its own phase, and the report says so and why."""
    report = _fake_tinygrad_run(tmp_path, fails="CPU")
    note = report["peer_threads"]["tinygrad_bf16"]
    assert note.startswith("1 (NUM_CPU_THREADS; DEV=CPU:X86")
    assert "default renderer failed: CPU: CalledProcessError: clang exited with status 1" in note
    for res in report["results"]:
        assert "tinygrad_bf16" not in res["regions"] and "tinygrad_bf16" not in res["samples"]
        phase = res["separate"]["tinygrad_bf16"]
        assert phase["regions"] == ["tgrad", "tgrad_call", "tinygrad_bf16"] and phase["repeat"] == 4
        assert all(len(v) == 4 for v in phase["samples"].values())
        for i, order in enumerate(phase["orders"]):
            shift = i % 3
            assert order == phase["regions"][shift:] + phase["regions"][:shift]
        peer = res["peers"]["tinygrad_bf16"]
        assert peer["phase"] == "separate" and "phase" not in res["peers"]["numpy_f32"]
        theirs = np.array(phase["samples"]["tinygrad_bf16"])
        ours = np.array(phase["samples"]["tgrad"])
        assert math.isclose(peer["ratio"], float(np.median(theirs / ours)))
    text = (tmp_path / "out" / "bench.md").read_text()
    assert "tinygrad bf16 / tgrad time" in text
    assert "tinygrad bf16 is timed in a phase of its own" in text


def test_tinygrads_phase_is_sized_by_the_budget_on_its_own(tmp_path):
    """Without --repeat, the separate phase gets the repetitions its own calls fit in the budget,
    not the main loop's (which fast regions push to the maximum)."""
    report = _fake_tinygrad_run(tmp_path, fails="", args=("--budget", "0.2"), sleep=0.03)
    for res in report["results"]:
        assert res["repeat"] > bench_module.AUTO_MIN_REPEAT
        assert res["separate"]["tinygrad_bf16"]["repeat"] == bench_module.AUTO_MIN_REPEAT


def test_tinygrad_that_cannot_run_bf16_is_named_not_timed(tmp_path):
    report = _fake_tinygrad_run(tmp_path, fails="CPU,CPU:X86")
    assert "tinygrad_bf16" not in report["peer_threads"]
    for res in report["results"]:
        assert "tinygrad_bf16" not in res["peers"] and res["separate"] == {}
        why = res["peers_skipped"]["tinygrad_bf16"]
        assert why.startswith("tinygrad cannot run a bf16 matmul here: CPU: CalledProcessError")
        assert "; CPU:X86: CalledProcessError: clang exited with status 1" in why
    assert "phase of its own" not in (tmp_path / "out" / "bench.md").read_text()


def test_a_tinygrad_without_the_settings_the_bench_uses_is_named_not_timed(tmp_path):
    report = _fake_tinygrad_run(tmp_path, fails="", without=("tinygrad/helpers.py",))
    for res in report["results"]:
        assert "tinygrad_bf16" not in res["peers"]
        assert "lacks the settings the bench uses" in res["peers_skipped"]["tinygrad_bf16"]


def test_wait_quiet_is_bounded_and_recorded(tmp_path):
    proc = bench("--shape", "4x4x4", "--repeat", "2", "--no-peers", "--wait-quiet", "0.6",
                 out=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    for waited in (report["results"][0]["waited_for_quiet_s"],
                   report["limits"]["waited_for_quiet_s"]):
        assert waited is None or 0 < waited < 60


def test_no_progress_on_a_pipe_unless_asked(tmp_path):
    proc = bench("--shape", "8x8x8", "--repeat", "2", "--no-peers", out=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "[0/1]" not in proc.stderr and "shape/s" not in proc.stderr


def test_bench_module_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import tgrad.bench as b\n"
            "assert b._torch() is None\n"
            "r = b.run_shape((8, 8, 8), repeat=3)\n"
            "assert r['byte_match'] is True and 'torch_bf16' not in r['peers']\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=_env())
    assert proc.returncode == 0, proc.stderr


# ---- limits timed beside the shapes -----------------------------------------------------------

SHARE_RE = re.compile(r"^(\d+\.\d) \[(\d+\.\d), (\d+\.\d)\]$")


@pytest.mark.parametrize("shape, limits", [((1, 2048, 512), {"limit_read"}),
                                           ((512, 512, 256), {"limit_peak"}),
                                           ((16, 4096, 1024), {"limit_read", "limit_peak"})])
def test_limits_are_timed_beside_the_shapes_they_judge(shape, limits):
    """A memory-bound shape gets a plain read of its operands in every round, a big one its flops
    on the peak probe's instruction stream (a big memory-bound one both): a paired share whose
    interval recomputes from the raw samples, reported apart from the peers."""
    res = bench_module.run_shape(shape, repeat=5, peers=False)
    assert res["byte_match"] is True
    assert set(res["regions"]) & set(bench_module.LIMIT_REGIONS) == limits
    assert set(res["paired_limits"]) == limits and not limits & set(res["peers"])
    for limit in limits:
        _check_paired_limit(res, limit, shape)


def _check_paired_limit(res, limit, shape):
    lim = res["paired_limits"][limit]
    ours, theirs = np.array(res["samples"]["tgrad"]), np.array(res["samples"][limit])
    assert len(theirs) == 5 and math.isclose(lim["median_s"], float(np.median(theirs)))
    assert math.isclose(lim["share"], float(np.median(theirs / ours)))
    assert bench_module.bootstrap_ratio(theirs, ours) == pytest.approx(
        (lim["share"], lim["lo"], lim["hi"]))
    assert 0 < lim["lo"] <= lim["share"] <= lim["hi"]
    m, k, n = shape
    if limit == "limit_read":
        assert res["read_bytes"] == 2 * (m * k + k * n)
        assert math.isclose(lim["gbps"], res["read_bytes"] / lim["median_s"] / 1e9)
    else:
        assert math.isclose(lim["gflops"], 2 * m * k * n / lim["median_s"] / 1e9)
    key = "py_read_pct_paired" if limit == "limit_read" else "py_peak_pct_paired"
    line = next(x for x in bench_module.format_shape(res) if x.startswith(key + ": "))
    pct, lo, hi = (float(v) for v in SHARE_RE.match(line.split(": ", 1)[1]).groups())
    assert lo <= pct <= hi and pct == pytest.approx(100 * lim["share"], abs=0.05)


def test_small_shapes_and_the_opt_out_time_no_limit():
    for res in (bench_module.run_shape((8, 8, 8), repeat=3, peers=False),
                bench_module.run_shape((1, 2048, 512), repeat=3, peers=False,
                                       limits_paired=False)):
        assert res["paired_limits"] == {}
        assert not set(res["regions"]) & set(bench_module.LIMIT_REGIONS)
        assert not any("pct_paired" in x for x in bench_module.format_shape(res))


def test_markdown_gives_the_paired_share_and_the_copy_share(tmp_path):
    proc = bench("--shape", "1x2048x512", "--repeat", "3", "--no-peers", out=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "bench.md").read_text()
    header = next(x for x in text.splitlines() if x.startswith("| shape | bytes"))
    assert "% of the paired read [95%]; of copy bw" in header
    row = next(x for x in text.splitlines() if x.startswith("| 1x2048x512 |"))
    assert re.search(r"\| [\d.]+ \(\d+% \[\d+, \d+\]; \d+%\) \|", row), row
    report = json.loads((tmp_path / "bench.json").read_text())
    assert "limit_read" in report["method"]["regions"]


# ---- statistics -------------------------------------------------------------------------------


@pytest.mark.parametrize("true_ratio", [0.6, 1.0, 1.5, 3.0])
def test_bootstrap_interval_contains_the_true_ratio(true_ratio):
    rng = np.random.default_rng(7)
    n = 60
    drift = rng.uniform(0.8, 1.6, n)  # load that hits both sides of a repetition
    ours = 1e-3 * drift * rng.lognormal(0, 0.05, n)
    theirs = true_ratio * 1e-3 * drift * rng.lognormal(0, 0.05, n)
    ratio, lo, hi = bench_module.bootstrap_ratio(theirs, ours, seed=3)
    assert lo <= true_ratio <= hi
    assert lo <= ratio <= hi
    assert hi / lo < 1.2  # pairing removes the shared drift
    expected = "win" if true_ratio > 1 else "loss" if true_ratio < 1 else "tie"
    assert bench_module.verdict(lo, hi) == expected
    # seeded: the same samples give the same interval
    assert bench_module.bootstrap_ratio(theirs, ours, seed=3) == (ratio, lo, hi)


def test_verdict_claims_a_win_only_above_one():
    verdict = bench_module.verdict
    assert verdict(1.01, 1.5) == "win"
    assert verdict(1.0, 1.5) == "tie"  # an interval touching 1 does not exclude it
    assert verdict(0.5, 1.0) == "tie"
    assert verdict(0.5, 0.99) == "loss"
    assert verdict(0.9, 1.1) == "tie"


def test_bootstrap_rejects_unpaired_samples():
    with pytest.raises(ValueError):
        bench_module.bootstrap_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        bench_module.bootstrap_ratio([], [])


# ---- docs/performance.md ----------------------------------------------------------------------


def test_doc_section_is_replaced_and_the_rest_kept(tmp_path):
    doc = tmp_path / "perf.md"
    doc.write_text(f"# Title\n\nintro\n\n{bench_module.DOC_BEGIN}\nold table\n"
                   f"{bench_module.DOC_END}\n\nafter\n")
    proc = bench("--shape", "4x4x4", "--repeat", "2", "--no-peers", "--doc", str(doc),
                 out=tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = doc.read_text()
    assert text.startswith("# Title\n\nintro\n\n" + bench_module.DOC_BEGIN + "\n### tgrad bench, ")
    assert "old table" not in text and "| 4x4x4 |" in text
    assert text.endswith(bench_module.DOC_END + "\n\nafter\n")


def test_doc_without_markers_is_refused_before_running(tmp_path):
    doc = tmp_path / "perf.md"
    doc.write_text("no markers\n")
    proc = bench("--shape", "4x4x4", "--doc", str(doc), out=tmp_path / "out")
    assert proc.returncode == 2 and "bench:begin" in proc.stderr
    assert "py_shape" not in proc.stdout and doc.read_text() == "no markers\n"


def test_performance_doc_holds_a_generated_table():
    doc = Path(__file__).resolve().parents[2] / "docs" / "performance.md"
    text = doc.read_text()
    section = text[text.index(bench_module.DOC_BEGIN):text.index(bench_module.DOC_END)]
    assert "Command: `" in section and "| shape | bytes |" in section
    assert "nox -s bench" in text


def test_load_of_other_processes_is_what_this_process_did_not_use():
    before = (1000, 400, 0, 100)  # all ticks, idle ticks, stolen ticks, this process's ticks
    after = (1200, 450, 20, 180)  # 200 ticks: 50 idle, 20 stolen, 80 ours -> 50 others
    load = bench_module._others_load(before, after)
    assert load == pytest.approx({"others": 0.25, "steal": 0.10})
    assert bench_module._others_load(before, before) is None
    assert bench_module._others_load(None, after) is None
