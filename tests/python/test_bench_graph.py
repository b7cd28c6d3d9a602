"""``python -m tgrad bench --graph``: MLP blocks, the fused = unfused byte check, reports.

Tiny blocks only (d = 64, a few repetitions): seconds each. No test here asserts a time or a
ratio's value; timings only have to exist and be consistent with the raw samples.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import tgrad  # noqa: F401  (a missing binding is a failure, not a skip)
from tgrad import bench as bench_module
from tgrad.bench import graph as bench_graph
from tgrad.__main__ import main

#: Each test runs the bench (in this process or a child): the slow tier (noxfile.py TIERS).
pytestmark = pytest.mark.slow

RATIO_RE = re.compile(r"^(\S+) \[(\S+), (\S+)\] (win|loss|tie)$")
FIRST_KEYS = ["graph_block", "graph_name", "graph_fused_equals_unfused", "graph_pipeline_ok",
              "graph_median_s"]
COLUMNS = ["block", "M", "fused = unfused", "reps", "others' CPU", "tgrad fused", "tgrad GFLOP/s",
           "tgrad unfused", "unfused / fused", "torch eager", "torch eager / tgrad",
           "torch.compile", "torch.compile / tgrad", "max diff vs torch eager"]
TINY = "gelu:1x64x256,silu:1x64x176"


def graph(*args: str, out: Path, timeout: float = 120, no_torch: bool = False,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m tgrad bench --graph ARGS --out OUT`` (without torch importable when
    `no_torch`)."""
    argv = ["bench", "--graph", *args, "--out", str(out)]
    if no_torch:
        code = ("import sys; sys.modules['torch'] = None\n"
                "from tgrad.__main__ import main\n"
                f"sys.exit(main({argv!r}))\n")
        command = [sys.executable, "-c", code]
    else:
        command = [sys.executable, "-m", "tgrad", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else dict(os.environ))


def parse(stdout: str) -> list[dict[str, str]]:
    """One dict of 'key: value' lines per block (the closing block names the files)."""
    chunks = []
    for chunk in stdout.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        chunks.append(lines)
    assert "bench_markdown" in chunks[-1], chunks[-1]
    return [c for c in chunks if "graph_block" in c]


def table(markdown: str) -> tuple[list[str], list[list[str]]]:
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    split = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]
    return split[0], split[1:]


# ---- without torch ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def no_torch_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, Path]:
    out = tmp_path_factory.mktemp("graph-out")
    extra = tmp_path_factory.mktemp("json") / "copy.json"
    proc = graph("--graph-shapes", TINY, "--repeat", "4", "--threads", "1", "--json", str(extra),
                 out=out, no_torch=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, out, extra


def test_tiny_blocks_run_without_torch(no_torch_run: tuple[Any, Path, Path]) -> None:
    proc, _, _ = no_torch_run
    found = parse(proc.stdout)
    assert [b["graph_block"] for b in found] == TINY.split(",")
    for block in found:
        assert list(block)[:5] == FIRST_KEYS
        assert block["graph_fused_equals_unfused"] == "true" and block["graph_pipeline_ok"] == "true"
        assert float(block["graph_median_s"]) > 0 and block["graph_repeat"] == "4"
        assert block["graph_threads"] == "1"
        assert RATIO_RE.match(block["ratio_tgrad_unfused"])
        assert block["peer_torch_eager"] == "unavailable: torch not importable"
        assert block["peer_torch_compile"] == "unavailable: torch not importable"
        assert "ratio_torch_eager" not in block
    # the scheduler fused each block's epilogues, and ran every op alone with fusion off
    gelu, silu = found
    assert gelu["graph_kernels_fused"] == "matmul+add+gelu, matmul+add"
    assert gelu["graph_kernels_unfused"] == "matmul, add, gelu, matmul, add"
    assert len(silu["graph_kernels_unfused"].split(", ")) == 5
    assert len(silu["graph_kernels_fused"].split(", ")) < 5


def test_json_is_valid_and_its_ratios_recompute(no_torch_run: tuple[Any, Path, Path]) -> None:
    _, out, extra = no_torch_run
    text = (out / "bench-graph.json").read_text()
    assert extra.read_text() == text
    report = json.loads(text)  # strict JSON: no NaN (json.loads would accept it; check below)
    assert "NaN" not in text and "Infinity" not in text
    assert report["schema"] == "tgrad-bench-graph/1" and report["threads"] == 1
    boot = report["method"]["bootstrap"]
    assert [r["spec"] for r in report["results"]] == TINY.split(",")
    for res in report["results"]:
        assert res["fused_equals_unfused"] is True and res["repeat"] == 4
        assert res["regions"] == ["tgrad", "tgrad_unfused"]
        assert all(len(res["samples"][r]) == 4 for r in res["regions"])
        for i, order in enumerate(res["orders"]):  # rotated by one per round
            assert order == res["regions"][i % 2:] + res["regions"][:i % 2]
        assert math.isclose(res["median_s"], float(np.median(res["samples"]["tgrad"])))
        theirs, ours = np.array(res["samples"]["tgrad_unfused"]), np.array(res["samples"]["tgrad"])
        peer = res["peers"]["tgrad_unfused"]
        again = bench_module.bootstrap_ratio(theirs, ours, seed=boot["seed"],
                                             resamples=boot["resamples"])
        assert again == pytest.approx((peer["ratio"], peer["lo"], peer["hi"]))
        assert peer["verdict"] == bench_module.verdict(peer["lo"], peer["hi"])


def test_markdown_has_the_columns_and_a_row_per_block(no_torch_run: tuple[Any, Path, Path]) -> None:
    _, out, _ = no_torch_run
    text = (out / "bench-graph.md").read_text()
    head, rows = table(text)
    assert head == COLUMNS
    body = [row for row in rows if not set("".join(row)) <= set("-|")]
    assert [row[:3] for row in body] == [["GELU MLP 64->256->64", "1", "identical"],
                                         ["SiLU-gated MLP 64->176->64", "1", "identical"]]
    assert all(len(row) == len(COLUMNS) for row in body)
    assert all(RATIO_RE.match(row[8]) for row in body)
    assert all(row[9] == "unavailable" for row in body)
    assert "Command: `" in text and "torch eager bf16: torch not importable" in text


# ---- with torch ---------------------------------------------------------------------------------


@pytest.mark.interop
def test_tiny_block_against_torch_eager(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = graph("--graph-shapes", "gelu:1x64x256", "--repeat", "3", "--no-compile", "--no-reexec",
                 out=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (block,) = parse(proc.stdout)
    assert block["graph_fused_equals_unfused"] == "true"
    assert RATIO_RE.match(block["ratio_torch_eager"])
    assert float(block["peer_torch_eager_median_s"]) > 0
    assert re.match(r"^\S+ \(largest output \S+; [\d.]+% of elements differ\)$", block["diff_torch_eager"])
    assert block["peer_torch_compile"] == "unavailable: left out (--no-compile)"
    (res,) = json.loads((tmp_path / "bench-graph.json").read_text())["results"]
    assert res["regions"] == ["tgrad", "tgrad_unfused", "torch_eager"]
    diff = res["differences"]["torch_eager"]
    # torch rounds once after the bias, tgrad per op: close, not required equal
    assert diff["nan_mismatch"] == 0 and diff["max_abs"] <= 0.05 * diff["max_abs_out"]
    head, rows = table((tmp_path / "bench-graph.md").read_text())
    assert RATIO_RE.match(rows[-1][head.index("torch eager / tgrad")])


# ---- the byte check -----------------------------------------------------------------------------


def test_fused_results_that_differ_from_unfused_fail_loudly(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    real = bench_graph._tgrad_bits

    def one_bit_off_when_unfused(tgrad_: Any, program: Any, fused: bool) -> np.ndarray:
        bits = real(tgrad_, program, fused)
        if not fused:
            bits = bits.copy()
            bits[0, 3] ^= 1
        return bits

    monkeypatch.setattr(bench_graph, "_tgrad_bits", one_bit_off_when_unfused)
    status = main(["bench", "--graph", "--graph-shapes", "gelu:1x64x256", "--repeat", "2",
                   "--no-peers", "--out", str(tmp_path)])
    assert status == 1
    (block,) = parse(capsys.readouterr().out)
    assert block["graph_fused_equals_unfused"] == "false"
    assert block["graph_byte_detail"].startswith("1 of 64 elements differ, first at [0, 3]: fused 0x")
    assert block["graph_error"].startswith("fused and unfused results differ")
    assert block["graph_repeat"] == "0"  # not timed
    report = json.loads((tmp_path / "bench-graph.json").read_text())
    assert report["results"][0]["fused_equals_unfused"] is False
    _, rows = table((tmp_path / "bench-graph.md").read_text())
    assert rows[-1][2] == "**DIFFER**"


def test_the_fusion_switch_is_restored(tmp_path: Path) -> None:
    before = tgrad.fusion_enabled()
    block = bench_graph.Block("gelu", 1, 64, 256)
    res = bench_graph.run_block(block, repeat=2, peers=False)
    assert res["fused_equals_unfused"] is True and tgrad.fusion_enabled() == before


def test_slow_blocks_need_fewer_rounds_than_the_matmul_benchs_minimum() -> None:
    assert bench_graph.auto_repeat(0.01, 2.0) == 200  # the matmul bench's cap
    assert bench_graph.auto_repeat(1.0, 2.0) == bench_module.AUTO_MIN_REPEAT == 10
    assert bench_graph.auto_repeat(bench_graph.SLOW_ROUND_S + 1, 2.0) == bench_graph.SLOW_MIN_REPEAT
    assert bench_graph.auto_repeat(60.0, 600.0) == 10  # a budget for more still gets more


# ---- torch.compile where it cannot run ----------------------------------------------------------


def _fake_torch(compile_fails: bool, seconds: float = 0.0) -> Any:
    def compile_(fn: Any, dynamic: bool) -> Any:
        if compile_fails:
            raise RuntimeError("no C++ compiler found\nmore lines")

        def compiled(*args: Any) -> Any:
            return fn(*args)
        return compiled

    return SimpleNamespace(compile=compile_, _dynamo=SimpleNamespace(reset=lambda: None))


def test_a_torch_compile_that_fails_is_unavailable_with_its_reason() -> None:
    compiler = bench_graph._Compile(True, 300.0)
    region, first, info = compiler.build(_fake_torch(True), lambda x: x, (1,))
    assert region is None and first is None
    assert info == {"unavailable": "RuntimeError: no C++ compiler found"}
    assert compiler.off is None  # the next block tries again


def test_a_compile_over_the_limit_leaves_torch_compile_out_of_later_blocks() -> None:
    compiler = bench_graph._Compile(True, 1e-9)
    region, first, info = compiler.build(_fake_torch(False), lambda x: x + 1, (1,))
    assert region is not None and region() == 2 and first == 2 and info["compile_s"] >= 0
    region, _, info = compiler.build(_fake_torch(False), lambda x: x, (1,))
    assert region is None and "compile took" in info["unavailable"]


# ---- command line -------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["foo", "gelu:0x8x8", "relu:1x8x8", "gelu:1x8", "tiny,gelu:1x8x8x8"])
def test_a_bad_block_is_a_usage_error(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--graph-shapes", bad, "--list"])
    assert exc.value.code == 2 and "invalid block" in capsys.readouterr().err


def test_list_names_the_blocks_without_running(capsys: pytest.CaptureFixture[str]) -> None:
    def listed(*args: str) -> list[str]:
        assert main(["bench", "--graph", *args, "--list"]) == 0
        return [line.split()[0] for line in capsys.readouterr().out.splitlines()]

    assert listed() == [b.spec for b in bench_graph.BLOCK_SETS["default"][1]]
    full = listed("--graph-shapes", "full")
    assert {"gelu:512x4096x16384", "silu:1x4096x11008", "silu:512x4096x11008"} <= set(full)
    assert listed("--graph-shapes", "tiny,gelu:2x8x16", "--graph-shapes", "silu:3x4x5") == [
        "gelu:1x64x256", "silu:1x64x176", "gelu:2x8x16", "silu:3x4x5"]


def test_matmul_shapes_are_refused_with_graph(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--graph", "--shape", "8x8x8"]) == 2
    assert "--graph-shapes" in capsys.readouterr().err


def test_doc_section_is_replaced_and_the_rest_kept(tmp_path: Path) -> None:
    doc = tmp_path / "perf.md"
    doc.write_text(f"intro\n{bench_module.DOC_BEGIN}\nmatmul\n{bench_module.DOC_END}\n"
                   f"{bench_graph.DOC_BEGIN}\nold\n{bench_graph.DOC_END}\nafter\n")
    proc = graph("--graph-shapes", "gelu:1x64x256", "--repeat", "2", "--no-peers", "--doc", str(doc),
                 out=tmp_path / "out", no_torch=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = doc.read_text()
    assert "\nmatmul\n" in text and "\nold\n" not in text and text.endswith("after\n")
    assert f"{bench_graph.DOC_BEGIN}\n### tgrad bench --graph, " in text
    assert "| GELU MLP 64->256->64 | 1 | identical |" in text


def test_doc_without_the_graph_markers_is_refused_before_running(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "perf.md"
    doc.write_text(f"{bench_module.DOC_BEGIN}\n{bench_module.DOC_END}\n")
    status = main(["bench", "--graph-shapes", "gelu:1x64x256", "--doc", str(doc), "--out",
                   str(tmp_path / "out")])
    out = capsys.readouterr()
    assert status == 2 and "bench-graph:begin" in out.err and "graph_block" not in out.out


def test_performance_doc_holds_a_graph_table() -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "performance.md"
    text = doc.read_text()
    section = text[text.index(bench_graph.DOC_BEGIN):text.index(bench_graph.DOC_END)]
    assert "Command: `" in section and "| block | M | fused = unfused |" in section
