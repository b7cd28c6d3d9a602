"""``python -m tgrad bench --order``: the order of tgrad's products in every bench mode, the byte
check's oracle in the same order, the order named in the reports, carried by the re-exec and into
bench --generate's child. In this process, tiny shapes, no peers (core tier) except the --generate
run (child processes: slow tier). No time is asserted."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tgrad
from tgrad import _conformance
from tgrad.__main__ import main
from tgrad.bench import cli, generate, machine
from tgrad.bench.measure import run_shape


def is_block32_route(route: str) -> bool:
    """A CPU route of the block32 order: AMX (`cpu.amx.gemm`) or a variant's block32 kernel
    (`cpu.portable_block32.gemm`, `cpu.avx512f_block32.rowvec`, ...); tests/python/
    test_matmul_order.py pins which runs where. No pairwise route is named so."""
    return route.startswith("cpu.amx.") or "_block32." in route


#: A shape and fill where the two orders' bytes differ (checked below, so the byte check can fail).
SHAPE, FILL = (8, 64, 16), "exponents"


@pytest.fixture(autouse=True)
def _pairwise_after() -> Any:
    """Each test leaves this thread's order as it found it (a failing run must not leak block32)."""
    before = tgrad.get_matmul_order()
    yield
    tgrad.set_matmul_order(before)


@pytest.fixture
def fast_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The matmul bench's measured limits faked: a real stream copy takes seconds."""
    limits = {"peak": {"gflops": 100.0, "source": "faked by the test"},
              "stream": {"copy_gbps": 10.0, "method": "faked by the test"}}
    monkeypatch.setattr(cli, "measure_limits", lambda threads: {k: dict(v) for k, v in limits.items()})
    monkeypatch.setattr(cli, "refresh_limits", lambda *args, **kwargs: None)


def _inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The bits run_shape makes for SHAPE and FILL (its seeding)."""
    fills = _conformance.module("fills")
    m, k, n = SHAPE
    rng = np.random.default_rng([seed, m, k, n])
    return fills.fill_bits(FILL, (m, k), rng), fills.fill_bits(FILL, (k, n), rng)


def _shape(**kwargs: Any) -> dict[str, Any]:
    return run_shape(SHAPE, repeat=1, peers=False, limits_paired=False, fill=FILL, **kwargs)


def test_the_fill_tells_the_two_orders_apart() -> None:
    """Without this, the byte checks below could not see an oracle in the wrong order."""
    oracle = _conformance.module("oracle")
    a, b = _inputs()
    pairwise, block32 = (oracle.matmul_bits(a, b, order=o) for o in ("pairwise", "block32"))
    assert np.count_nonzero(pairwise != block32) > 0


@pytest.mark.parametrize("order", ["pairwise", "block32"])
def test_a_shape_is_checked_against_the_oracle_in_its_order(order: str) -> None:
    with tgrad.matmul_order(order):
        res = _shape()
    assert res["matmul_order"] == order
    assert res["byte_check"] == "done" and res["byte_match"] is True, res.get("first_mismatch")
    assert is_block32_route(res["route"]) is (order == "block32"), res["route"]


def test_an_oracle_in_the_wrong_order_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bench that forgot to pass the order to the oracle: pairwise bytes against the default
    (block32) oracle are a mismatch, named."""
    oracle = _conformance.module("oracle")
    real = oracle.matmul_bits
    monkeypatch.setattr(oracle, "matmul_bits", lambda a, b, **kwargs: real(a, b))
    with tgrad.matmul_order("pairwise"):
        res = _shape()
    assert res["byte_match"] is False and res["mismatches"] > 0


def test_the_order_option_reaches_the_products_and_the_reports(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fast_limits: None) -> None:
    m, k, n = SHAPE
    tgrad.set_matmul_order("pairwise")  # the caller's order (the fixture restores the default)
    status = main(["bench", "--order", "block32", "--shape", f"{m}x{k}x{n}", "--repeat", "2",
                   "--no-peers", "--no-reexec", "--no-progress", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    lines = dict(line.split(": ", 1) for line in out.split("\n\n")[0].splitlines())
    assert lines["py_matmul_order"] == "block32" and lines["py_byte_match"] == "true"
    assert is_block32_route(lines["py_route"]), lines["py_route"]
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["matmul_order"] == "block32"
    assert [r["matmul_order"] for r in report["results"]] == ["block32"]
    assert "matmul order `block32`" in (tmp_path / "bench.md").read_text()
    assert tgrad.get_matmul_order() == "pairwise"  # the run restores the thread's order


def test_the_default_order_is_the_callers(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         fast_limits: None) -> None:
    """Without --order the bench runs the calling thread's order: the library's default, block32."""
    status = main(["bench", "--shape", "4x4x4", "--repeat", "2", "--no-peers", "--no-reexec",
                   "--no-progress", "--out", str(tmp_path)])
    assert status == 0
    assert "py_matmul_order: block32" in capsys.readouterr().out
    assert json.loads((tmp_path / "bench.json").read_text())["matmul_order"] == "block32"


def test_graph_blocks_run_in_the_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["bench", "--graph-shapes", "gelu:4x64x256", "--order", "block32", "--repeat", "2",
                   "--no-peers", "--no-reexec", "--no-progress", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    block = dict(line.split(": ", 1) for line in out.split("\n\n")[0].splitlines())
    assert block["graph_fused_equals_unfused"] == "true" and block["graph_matmul_order"] == "block32"
    assert all(is_block32_route(r) for r in block["graph_routes"].split(", ")), block["graph_routes"]
    report = json.loads((tmp_path / "bench-graph.json").read_text())
    assert report["matmul_order"] == "block32" and report["results"][0]["matmul_order"] == "block32"
    assert "matmul order `block32`" in (tmp_path / "bench-graph.md").read_text()


def test_op_benches_record_the_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["bench", "--batched", "--order", "block32", "--budget", "0.01", "--no-peers",
                   "--out", str(tmp_path)])
    assert status == 0, capsys.readouterr()
    (report,) = (json.loads(p.read_text()) for p in tmp_path.glob("*.json"))
    assert report["matmul_order"] == "block32"


@pytest.mark.parametrize("bad", ["block16", "PAIRWISE", ""])
def test_an_unknown_order_is_a_usage_error(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--order", bad, "--list"])
    assert exc.value.code == 2 and "--order" in capsys.readouterr().err


def test_the_reexec_carries_the_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench re-executes itself with its own argv: --order is in it."""
    seen: list[list[str]] = []

    def execve(path: str, argv: list[str], env: dict[str, str]) -> None:
        seen.append(argv)

    monkeypatch.setattr(machine.os, "execve", execve)
    for key in machine.SPIN_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv(machine.REEXEC_MARK, raising=False)
    argv = ["bench", "--order", "block32", "--shape", "8x8x8"]
    monkeypatch.setattr(sys, "argv", [str(Path(tgrad.__file__).parent / "__main__.py"), *argv])
    machine._maybe_reexec(argparse.Namespace(no_reexec=False, no_peers=False))
    assert seen and seen[0][-len(argv):] == argv


def test_generate_gives_its_tgrad_child_the_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child's argv carries the order (before the llama.cpp peer's GGUF path), and a child
    that ran another order is an error."""
    calls: list[list[str]] = []
    answer = {"prefill_s": 1.0, "decode_s": 1.0, "rss_mb": 1.0, "matmul_order": "block32"}

    def fake_run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, json.dumps(answer) + "\n", "")

    monkeypatch.setattr(generate.subprocess, "run", fake_run)
    args = argparse.Namespace(gen_prompt=4, gen_tokens=2, order="block32")
    assert generate._child("tgrad", Path("m"), 1, args)["matmul_order"] == "block32"
    assert calls[0][-2:] == ["block32", ""]
    args.order = "pairwise"
    with pytest.raises(RuntimeError, match="ran the block32 order, not pairwise"):
        generate._child("tgrad", Path("m"), 1, args)


@pytest.mark.slow  # child processes
def test_the_generate_bench_runs_its_products_in_the_order(tmp_path: Path) -> None:
    from model_dirs import model_dir

    path = model_dir(tmp_path / "llama")
    out = subprocess.run([sys.executable, "-m", "tgrad", "bench", "--generate", "--gen-model", str(path),
                          "--no-peers", "--gen-rounds", "1", "--gen-prompt", "5", "--gen-tokens", "2",
                          "--threads", "1", "--order", "block32", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, check=True).stdout
    assert "tgrad's matmul order block32" in out
    routes = next(line for line in out.splitlines() if line.startswith("tgrad's prefill products: "))
    assert all(is_block32_route(r) for r in routes.split(": ", 1)[1].split(", ")), routes
