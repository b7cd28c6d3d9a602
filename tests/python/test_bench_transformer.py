"""``python -m tgrad bench --transformer``'s plumbing on small rows: every row runs through its bench
module, its bytes are checked, the table and the JSON report are written, and a wrong byte makes
the run fail. No time is asserted (speed is what the bench itself shows, docs/performance.md)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tgrad
from tgrad.__main__ import main
from tgrad.bench import batched, norms, reduce, transformer

SMALL = [transformer.Row("softmax small", reduce, reduce.Case("softmax(dim=-1), [8, 64]", (8, 64), -1, "softmax")),
         transformer.Row("rms_norm small", norms, norms.Case("rms_norm, [8, 64]", (8, 64), "rms_norm")),
         transformer.Row("layer_norm small", norms, norms.Case("layer_norm, [8, 32]", (8, 32), "layer_norm")),
         transformer.Row("attention small", None, transformer.Attention(1, 4, 2, 16, 8)),
         transformer.Row("batched small", batched, batched.Case(2, 8, 16, 8))]


def test_the_default_rows_are_issue_34s() -> None:
    labels = [row.label for row in transformer.ROWS]
    assert len(labels) == 5
    shapes = [row.case.shape for row in transformer.ROWS[:3]]
    assert shapes == [(4096, 4096), (4096, 4096), (4096, 1024)]
    assert [row.case.op for row in transformer.ROWS[:3]] == ["softmax", "rms_norm", "layer_norm"]
    assert transformer.ROWS[3].case == transformer.Attention(1, 32, 8, 512, 128)
    assert transformer.ROWS[4].case == batched.Case(16, 512, 512, 512)


def _run(tmp_path: Path, *extra: str) -> tuple[int, dict]:
    status = main(["bench", "--transformer", "--threads", "1", "--budget", "0.001", "--out", str(tmp_path), *extra])
    return status, json.loads((tmp_path / "bench-transformer.json").read_text())


def test_the_table_and_report_without_peers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    threads = tgrad.num_threads()
    monkeypatch.setattr(transformer, "ROWS", SMALL)
    try:
        status, report = _run(tmp_path, "--no-peers")
    finally:
        tgrad.set_num_threads(threads)
    assert status == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| op (1 threads, bf16, block32 order) | tgrad ms | torch ms |")
    body = table[2:2 + len(SMALL)]
    assert [line.split(" | ")[0] for line in body] == [f"| {row.label}" for row in SMALL]
    assert all(line.endswith("| checked |") and " | - | - | - |" in line for line in body), body
    assert report["threads"] == 1 and report["torch"] is None
    assert [r["label"] for r in report["results"]] == [row.label for row in SMALL]
    assert all(r["correct"] and r["tgrad_s"] > 0 and r["torch_s"] is None for r in report["results"])


def test_a_wrong_byte_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = transformer._composed

    def off_by_one(*args: object) -> np.ndarray:
        bits = real(*args)  # type: ignore[arg-type]
        bits.flat[0] ^= 1
        return bits

    threads = tgrad.num_threads()
    monkeypatch.setattr(transformer, "ROWS", SMALL[3:4])
    monkeypatch.setattr(transformer, "_composed", off_by_one)
    try:
        status, report = _run(tmp_path, "--no-peers")
    finally:
        tgrad.set_num_threads(threads)
    assert status == 1 and report["results"][0]["correct"] is False


@pytest.mark.interop
def test_the_table_against_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    threads, torch_threads = tgrad.num_threads(), torch.get_num_threads()
    monkeypatch.setattr(transformer, "ROWS", SMALL)
    try:
        status, report = _run(tmp_path)
    finally:
        tgrad.set_num_threads(threads)
        torch.set_num_threads(torch_threads)
    assert status == 0 and report["torch"] == torch.__version__
    for r in report["results"]:
        assert r["torch_s"] > 0 and r["torch"]["lo"] <= r["torch"]["ratio"] <= r["torch"]["hi"], r
        assert r["torch"]["verdict"] in ("win", "tie", "loss")
    assert "| - |" not in capsys.readouterr().out
