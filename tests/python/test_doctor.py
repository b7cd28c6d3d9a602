"""`python -m tgrad doctor`: one check per fact, PASS/WARN/FAIL/SKIP, exit 1 on any FAIL."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import pytest

import tgrad
from tgrad import __main__ as cli
from tgrad import doctor
from tgrad._ffi import lib

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCORECARDS = ROOT / "conformance" / "scorecards"


def _by_name(report: doctor.Report) -> dict[str, doctor.Check]:
    return {c.name: c for c in report.checks}


def test_a_sound_installation_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "--no-peak", "--scorecards", str(SCORECARDS)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"tgrad doctor: libtgrad {tgrad.version()} at ")
    for name in ("library", "backend cpu", "cpu isa", "threads", "peak", "capabilities"):
        assert any(line.split(None, 1)[1].startswith(name) for line in out.splitlines()
                   if line[:4] in doctor.STATES), name
    assert "summary: " in out and " 0 FAIL" in out


@pytest.mark.skipif(sys.platform == "darwin", reason="Metal may be built on macOS")
def test_metal_off_macos_says_not_built_on_this_platform(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "--no-peak"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "backend metal" in line)
    assert line.startswith("SKIP") and line.endswith("metal: not built on this platform")


def test_json_report_has_every_fact(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "--json", "--no-peak", "--scorecards", str(SCORECARDS)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True
    assert {c["state"] for c in data["checks"]} <= set(doctor.STATES)
    assert data["library"]["version"] == tgrad.version()
    assert data["library"]["header_version_number"] == int(lib.TGRAD_VERSION_NUMBER)
    assert data["cpu"]["isa"] == tgrad.cpu_isa() and data["cpu"]["isas"] == tgrad.cpu_isas()
    assert data["cpu"]["threads"] == tgrad.num_threads()
    assert [b["name"] for b in data["backends"]] == [b.name for b in tgrad.backends()]
    assert len(data["capabilities"]) == len(tgrad.capabilities())
    assert {r["backend"] for r in data["scorecards"]} >= {"cpu"}
    assert sum(data["summary"].values()) == len(data["checks"])


def test_peak_is_measured_unless_skipped() -> None:
    measured = _by_name(doctor.collect(scorecards=SCORECARDS))["peak"]
    assert measured.state == "PASS" and "GFLOP/s" in measured.detail
    assert _by_name(doctor.collect(peak=False))["peak"].state == "SKIP"


def test_a_worse_cpu_variant_than_available_warns() -> None:
    runnable = [n for n, ok in tgrad.cpu_isas().items() if ok]
    if len(runnable) < 2:
        pytest.skip("one CPU variant runs here")
    isa_before = tgrad._cpu_isa_setting()
    tgrad.set_cpu_isa(runnable[-1])
    try:
        check = _by_name(doctor.collect(peak=False))["cpu isa"]
    finally:
        tgrad.set_cpu_isa(isa_before)
    assert check.state == "WARN" and runnable[0] in check.detail


class _OtherHeader:
    """libtgrad as seen by a binding written for another major version."""

    TGRAD_VERSION_NUMBER = 10000

    def __getattr__(self, name: str) -> Any:
        return getattr(lib, name)


def test_a_library_the_header_cannot_use_fails(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(doctor, "lib", _OtherHeader())
    check = _by_name(doctor.collect(peak=False))["library"]
    assert check.state == "FAIL" and "10000" in check.detail
    assert cli.main(["doctor", "--no-peak"]) == 1
    assert "FAIL  library" in capsys.readouterr().out


def _copy_cards(tmp_path: pathlib.Path) -> pathlib.Path:
    target = tmp_path / "scorecards"
    shutil.copytree(SCORECARDS, target)
    return target


def test_a_tampered_scorecard_fails(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    cards = _copy_cards(tmp_path)
    card = json.loads((cards / "cpu.json").read_text())
    card["cases"][0]["outcome"] = "fail"  # edited by hand: the attestation no longer matches
    (cards / "cpu.json").write_text(json.dumps(card))
    report = doctor.collect(peak=False, scorecards=cards)
    check = _by_name(report)["scorecard cpu"]
    assert check.state == "FAIL" and "attestation" in check.detail
    assert cli.main(["doctor", "--no-peak", "--scorecards", str(cards)]) == 1
    capsys.readouterr()


def test_scorecard_rows_show_backend_counts_claim_and_attestation(tmp_path: pathlib.Path) -> None:
    from tgrad.conformance import runner

    cards = tmp_path / "scorecards"
    base = {"id": "c", "family": "f", "detail": ""}
    runner.write(runner.scorecard("cpu", "ci", [dict(base, outcome="pass")], {}), cards / "cpu.json")
    runner.write(runner.scorecard("metal", "ci", [dict(base, outcome="skip")], {}), cards / "metal.json")
    runner.write(runner.scorecard("opencl", "ci", [dict(base, outcome="fail")], {}), cards / "opencl.json")
    report = doctor.collect(peak=False, scorecards=cards)
    checks = _by_name(report)
    assert checks["scorecard cpu"].state == "PASS"
    assert "cpu: 1/1 passed of 1; bit-exact on 1 of 1 requested cases; sha256 " in checks["scorecard cpu"].detail
    assert checks["scorecard metal"].state == "SKIP" and "no claim" in checks["scorecard metal"].detail
    assert checks["scorecard opencl"].state == "WARN"
    rows = {r["backend"]: r for r in report.facts["scorecards"]}
    cpu_card = runner.load(cards / "cpu.json")
    assert rows["cpu"]["attestation"] == cpu_card["attestation"]["digest"][:12]
    assert (rows["cpu"]["passed"], rows["cpu"]["executed"]) == (1, 1)


def test_missing_scorecards_are_skipped(tmp_path: pathlib.Path) -> None:
    check = _by_name(doctor.collect(peak=False, scorecards=tmp_path))["scorecards"]
    assert check.state == "SKIP"


def test_an_unreadable_scorecard_fails(tmp_path: pathlib.Path) -> None:
    (tmp_path / "cpu.json").write_text("{not json")
    assert _by_name(doctor.collect(peak=False, scorecards=tmp_path))["scorecard cpu"].state == "FAIL"


@pytest.mark.slow
def test_command_line_exit_status(tmp_path: pathlib.Path) -> None:
    env = dict(os.environ)
    result = subprocess.run([sys.executable, "-m", "tgrad", "doctor", "--no-peak", "--json"],
                            capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True
