"""`python -m tgrad bench --train` (issue 36's training bench): its options are checked (core
tier), and a tiny configuration runs end to end in a child process (slow tier; against torch, interop): the trajectory
lines, the table and the JSON report. No time is asserted (speed is what the bench itself shows,
docs/performance.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tgrad.__main__ import main
from tgrad.bench import train


@pytest.mark.parametrize("steps", ["0", "-1", "two"])
def test_train_steps_must_be_a_positive_integer(steps: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--train", "--train-steps", steps])
    assert exc.value.code == 2
    assert f"expected a positive integer, got '{steps}'" in capsys.readouterr().err


def test_the_default_cases_are_issue_36s() -> None:
    digits, wide, llama = train.CASES
    assert (digits.sizes, digits.batch) == ((64, 128, 128, 10), 64)
    assert (wide.sizes, wide.batch) == ((256, 256, 256, 10), 256)
    assert llama.length == 128 and dict(llama.llama)["hidden_size"] == 256 and not llama.sizes


def _bench(tmp_path: Path, *extra: str) -> tuple[list[str], dict]:
    out = subprocess.run([sys.executable, "-m", "tgrad", "bench", "--train", "--train-tiny", "--train-steps", "2",
                          "--threads", "1", "--out", str(tmp_path), *extra],
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines(), json.loads((tmp_path / "bench-train.json").read_text())


def _check(lines: list[str], report: dict, torch: str) -> None:
    labels = [case.label for case in train.TINY]
    for label in labels:
        line = next(line for line in lines if line.startswith(f"{label}: tgrad loss trajectory over 3 steps "))
        bits = line.split(" steps ")[1].split(",")[0].split()
        assert len(bits) == 3 and all(len(b) == 8 and int(b, 16) for b in bits), line
        assert line.endswith(f"run to run identical: yes; torch identical: {torch}") or torch == "any", line
    head = lines.index(next(line for line in lines if line.startswith("| case (1 threads, block32 order) | tgrad steps/s |")))
    body = lines[head + 2:head + 2 + len(labels)]
    assert [line.split(" | ")[0] for line in body] == [f"| {label}" for label in labels]
    for line in body:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert float(cells[1]) > 0 and cells[5] == "yes", line
    assert report["threads"] == 1 and len(report["results"]) == 3
    for r in report["results"]:
        assert r["tgrad_identical"] is True and len(r["tgrad_trajectory"]) == 3 and r["median_s"]["tgrad"] > 0


@pytest.mark.slow
def test_the_train_bench_alone_reports_steps_and_identical_trajectories(tmp_path: Path) -> None:
    lines, report = _bench(tmp_path, "--no-peers")
    _check(lines, report, "absent")
    assert report["torch"] is None and all("torch" not in r["median_s"] for r in report["results"])
    assert all(line.endswith("| - | - | - | yes | absent |") for line in lines if line.startswith("| tiny "))


@pytest.mark.interop
def test_the_train_bench_against_torch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    lines, report = _bench(tmp_path)
    _check(lines, report, "any")
    assert report["torch"] == torch.__version__
    for r in report["results"][:2]:  # the MLPs need torch alone; the Llama needs transformers too
        t = r["torch"]
        assert r["median_s"]["torch"] > 0 and t["lo"] <= t["ratio"] <= t["hi"]
        assert t["verdict"] in ("win", "tie", "loss")
        assert r["torch_identical"] in (True, False) and len(r["torch_trajectory"]) == 3
