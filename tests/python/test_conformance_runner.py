"""The conformance runner: scorecards (funnel, minimum, claim, attestation), the backends'
outcomes, skips that are never passes, and `python -m conformance` (--write, --check, --require)."""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib
from typing import Any

import numpy as np
import pytest

import tgrad
from tgrad.conformance import __main__ as conformance_cli
from tgrad.conformance import runner
from tgrad.conformance.graphs import graph_roster
from tgrad.conformance.rosters import roster

#: The CUDA emulator's driver in this checkout (the installed package has no tests/: the runner
#: finds it only beside a source tree, so the tests name it).
CUDA_EMU_DIR = pathlib.Path(__file__).resolve().parents[1] / "cuda_emu"
CASES = roster("ci")
FEW = [c for c in CASES if c.family in ("below_tile", "empty")][:6] + \
    [c for c in CASES if c.family == "views"][:3]


@pytest.fixture(scope="module")
def cpu_card() -> dict[str, Any]:
    return runner.run("cpu", cases=FEW)


def test_scorecard_has_every_field(cpu_card: dict[str, Any]) -> None:
    assert set(cpu_card) == {"suite", "backend", "environment", "cases", "funnel", "min_executed",
                             "claim", "claim_made", "attestation"}
    assert cpu_card["suite"]["version"] == runner.SUITE_VERSION and cpu_card["backend"] == "cpu"
    env = cpu_card["environment"]
    for key in ("python", "numpy", "platform", "cpu_isa", "threads", "library_version"):
        assert key in env, key
    assert env["library_version"] == tgrad.version()
    assert [c["id"] for c in cpu_card["cases"]] == [c.id for c in FEW]
    for case, result in zip(FEW, cpu_card["cases"]):
        assert set(result) == {"id", "family", "outcome", "detail"} and result["family"] == case.family


def test_cpu_cases_pass_bit_exact_on_every_variant(cpu_card: dict[str, Any]) -> None:
    assert {c["outcome"] for c in cpu_card["cases"]} == {"pass"}
    assert cpu_card["funnel"] == {"requested": 9, "executed": 9, "passed": 9, "failed": 0, "skipped": 0}
    assert cpu_card["claim"] == "bit-exact on 9 of 9 requested cases" and cpu_card["claim_made"]
    runnable = [n for n, ok in tgrad.cpu_isas().items() if ok]
    assert cpu_card["environment"]["cpu_isas_run"] == runnable


def test_a_wrong_output_fails_the_case_naming_the_variants(monkeypatch: pytest.MonkeyPatch) -> None:
    # The oracle disagreeing with one element is what a broken kernel looks like from here.
    real = runner.matmul_bits

    def off_by_one(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = real(a, b)
        if out.size:
            out.flat[0] ^= 1
        return out

    monkeypatch.setattr(runner, "matmul_bits", off_by_one)
    isa_before = tgrad._cpu_isa_setting()
    card = runner.run("cpu", cases=FEW[:3])
    failed = [c for c in card["cases"] if c["outcome"] == "fail"]
    assert failed, card["cases"]
    for isa in (n for n, ok in tgrad.cpu_isas().items() if ok):
        assert f"{isa}: " in failed[0]["detail"]
    assert "first C[0, 0]" in failed[0]["detail"]
    assert card["claim"].startswith("no claim: ") and not card["claim_made"]
    assert tgrad._cpu_isa_setting() == isa_before  # the choice in force before, restored


@pytest.mark.parametrize("backend", ["opencl", "metal"])
def test_an_unavailable_backend_skips_everything_and_claims_nothing(backend: str) -> None:
    row = next(b for b in tgrad.backends() if b.name == backend)
    if row.available:  # pragma: no cover - a machine with that device
        pytest.skip(f"{backend} is available here")
    card = runner.run(backend, cases=FEW)
    assert {c["outcome"] for c in card["cases"]} == {"skip"}
    assert all(c["detail"] == f"backend_unavailable: {backend}: {row.device}" for c in card["cases"])
    assert card["funnel"] == {"requested": 9, "executed": 0, "passed": 0, "failed": 0, "skipped": 9}
    assert card["claim"].startswith("no claim: 0 of 9") and not card["claim_made"]


@pytest.mark.parametrize("backend", ["msl-emu", "cuda-emu"])
def test_an_emulator_without_its_driver_skips_with_the_reason(tmp_path: pathlib.Path, backend: str) -> None:
    card = runner.run(backend, cases=FEW[:2], emu_dir=tmp_path)
    assert {c["outcome"] for c in card["cases"]} == {"skip"}
    assert card["cases"][0]["detail"].startswith(f"{backend}: no emulator driver at {tmp_path}")
    assert not card["claim_made"]


@pytest.mark.cuda
def test_cuda_emu_runs_rendered_cuda_bit_exactly() -> None:
    card = runner.run("cuda-emu", cases=FEW[:3] + FEW[-2:], emu_dir=CUDA_EMU_DIR)
    assert {c["outcome"] for c in card["cases"]} == {"pass"}, card["cases"]
    assert card["claim"] == "bit-exact on 5 of 5 requested cases" and card["environment"]["cxx"]


@pytest.mark.cuda
def test_cuda_emu_fails_a_case_whose_kernel_computes_wrong_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CUDA kernels, not the MSL ones, are what runs: a mutation of the CUDA text fails the case.
    from tgrad import render

    original = render.render_matmul

    def mutated(a: Any, b: Any, route: str = "tiled", lang: str = "msl") -> Any:
        k = original(a, b, route, lang)
        assert lang == "cuda" and "__global__" in k.source
        if route != "naive":
            return k
        head, _, tail = k.source.rpartition("c[m * ")  # the store, not the header comment
        return dataclasses.replace(k, source=head + "c[0 * m + " + tail)

    monkeypatch.setattr(render, "render_matmul", mutated)
    card = runner.run("cuda-emu", cases=[c for c in FEW if c.m > 1 and c.n > 1][:1], emu_dir=CUDA_EMU_DIR)
    assert card["cases"][0]["outcome"] == "fail" and card["cases"][0]["detail"].startswith("naive: ")


@pytest.mark.cuda
def test_cuda_emu_holds_the_tc_route_to_its_bound_not_to_the_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    # Until CUDA's tc route renders, the naive kernel stands in for it: exact (within the bound),
    # then with every result scaled by 1 + 2^-6 (outside it, 2^-8 relative being the bound's floor).
    from tgrad import render

    original, scale, asked = render.render_matmul, [""], []

    def with_tc(a: Any, b: Any, route: str = "tiled", lang: str = "msl") -> Any:
        if route != "tc":
            return original(a, b, route, lang)
        asked.append((a.shape, b.shape))
        k = original(a, b, "naive", lang)
        return dataclasses.replace(k, route="tc", source=k.source.replace(
            "tg_store_bf16(acc)", f"tg_store_bf16(acc{scale[0]})"))

    monkeypatch.setattr(render, "render_matmul", with_tc)
    normal = next(c for c in FEW if c.family == "views" and c.fill == "normal")
    special = next(c for c in CASES if c.fill == "special" and min(c.m, c.k, c.n) >= 8)
    card = runner.run("cuda-emu", cases=[normal, special], emu_dir=CUDA_EMU_DIR)
    assert [c["outcome"] for c in card["cases"]] == ["pass", "pass"], card["cases"]
    assert set(asked) == {((normal.m, normal.k), (normal.k, normal.n))}  # tc on finite fills only
    scale[0] = " * 1.015625f"
    card = runner.run("cuda-emu", cases=[normal], emu_dir=CUDA_EMU_DIR)
    detail = card["cases"][0]["detail"]
    assert card["cases"][0]["outcome"] == "fail" and detail.startswith("tc: ") and "break the tc error bound" in detail


def test_cli_refuses_cuda_where_it_is_unavailable(capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    row = next((b for b in tgrad.backends() if b.name == "cuda"), None)
    if row is not None and row.available:  # pragma: no cover - a machine with a CUDA device
        pytest.skip("cuda is available here")
    reason = "libtgrad has no cuda backend" if row is None else f"cuda: {row.device}"
    assert conformance_cli.main(["--backend", "cuda", "--write", "--scorecards", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert f"backend cuda refused: backend_unavailable: {reason}" in captured.err
    assert not list(tmp_path.iterdir())  # nothing written


def _results(*outcomes: str) -> list[dict[str, str]]:
    return [{"id": f"c{i}", "family": "f", "outcome": o, "detail": ""} for i, o in enumerate(outcomes)]


def test_skips_count_against_the_claim() -> None:
    ten = runner.scorecard("cpu", "ci", _results(*["pass"] * 9, "skip"), {})
    assert ten["min_executed"] == 9
    assert ten["claim"] == "bit-exact on 9 of 10 requested cases (1 skipped, not covered)"
    eight = runner.scorecard("cpu", "ci", _results(*["pass"] * 8, "skip", "skip"), {})
    assert eight["claim"] == "no claim: 8 of 10 requested cases executed, below the minimum of 9"
    failed = runner.scorecard("cpu", "ci", _results(*["pass"] * 9, "fail"), {})
    assert failed["claim"] == "no claim: 1 of 10 executed cases failed"


def test_the_attestation_covers_everything_but_the_environment(cpu_card: dict[str, Any]) -> None:
    assert runner.verify(cpu_card)
    body = {k: v for k, v in cpu_card.items() if k not in ("environment", "attestation")}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    import hashlib

    assert cpu_card["attestation"]["digest"] == hashlib.sha256(canonical.encode()).hexdigest()
    moved = copy.deepcopy(cpu_card)
    moved["environment"]["platform"] = "another machine"
    assert runner.verify(moved)
    for edit in (lambda c: c["cases"][0].update(outcome="fail"),
                 lambda c: c["funnel"].update(passed=0),
                 lambda c: c.update(claim="bit-exact on everything")):
        tampered = copy.deepcopy(cpu_card)
        edit(tampered)
        assert not runner.verify(tampered)


def test_check_reports_outcomes_and_funnel_not_environment(cpu_card: dict[str, Any]) -> None:
    same = copy.deepcopy(cpu_card)
    same["environment"] = {"python": "0.0"}
    same["cases"][1]["detail"] = "details differ between machines"
    assert runner.check(cpu_card, same) == []
    changed = copy.deepcopy(cpu_card)
    changed["cases"][0]["outcome"] = "fail"
    changed["funnel"]["passed"] -= 1
    changed["cases"].append({"id": "gone", "family": "f", "outcome": "pass", "detail": ""})
    diffs = runner.check(cpu_card, changed)
    assert f"case {FEW[0].id}: committed fail, now pass" in diffs
    assert "case gone: in the committed scorecard, not run now" in diffs
    assert "funnel passed: committed 8, now 9" in diffs


def test_write_is_pretty_sorted_with_a_trailing_newline(cpu_card: dict[str, Any], tmp_path: pathlib.Path) -> None:
    path = runner.scorecard_path("cpu", tmp_path)
    runner.write(cpu_card, path)
    text = path.read_text()
    assert text.endswith("}\n") and text == json.dumps(cpu_card, indent=2, sort_keys=True) + "\n"
    assert runner.load(path) == cpu_card


@pytest.mark.slow
def test_cli_write_then_check(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert conformance_cli.main(["--backend", "cpu", "--write", "--scorecards", str(tmp_path)]) == 0
    written = runner.load(tmp_path / "cpu.json")
    # the cpu backend runs the roster's graph cases too (conformance.graphs)
    assert written["funnel"]["requested"] == len(CASES) + len(graph_roster("ci")) and runner.verify(written)
    assert conformance_cli.main(["--backend", "cpu", "--check", "--scorecards", str(tmp_path)]) == 0
    assert "check: outcomes and funnel equal" in capsys.readouterr().out
    written["cases"][3]["outcome"] = "skip"
    written["funnel"]["skipped"] = 1
    runner.write(written, tmp_path / "cpu.json")
    assert conformance_cli.main(["--backend", "cpu", "--check", "--scorecards", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"case {CASES[3].id}: committed skip, now pass" in err and "funnel skipped" in err


def test_cli_check_without_a_committed_file_fails(tmp_path: pathlib.Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert conformance_cli.main(["--backend", "metal", "--check", "--scorecards", str(tmp_path)]) == 1
    assert "no committed scorecard" in capsys.readouterr().err


def test_cli_unavailable_backend_exits_0_unless_required(capsys: pytest.CaptureFixture[str]) -> None:
    if next(b for b in tgrad.backends() if b.name == "opencl").available:  # pragma: no cover
        pytest.skip("opencl is available here")
    assert conformance_cli.main(["--backend", "opencl"]) == 0
    out = capsys.readouterr().out
    # every case of the roster, products and graphs alike, is skipped
    assert f"skipped {len(CASES) + len(graph_roster('ci'))}" in out and "claim: no claim" in out
    assert conformance_cli.main(["--backend", "opencl", "--require"]) == 1
    assert "executed no case" in capsys.readouterr().err


def test_cli_refuses_an_unknown_backend(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        conformance_cli.main(["--backend", "vulkan"])
    assert info.value.code == 2
    capsys.readouterr()
