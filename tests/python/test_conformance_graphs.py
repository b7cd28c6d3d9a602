"""The graph cases of the conformance rosters (conformance.graphs, conformance.reference) and how the
runner judges them: on every CPU variant, fused and unfused, against the oracles, the two byte for
byte the same, and fusion seen in explain where the case has something to fuse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tgrad
from tgrad.conformance import runner
from tgrad.conformance.elementwise import ARITY, binary_bits, scalar_bits, unary_bits
from tgrad.conformance.graphs import PROGRAMS, GraphCase, build_graph_operands, graph_roster, reference_bits
from tgrad.conformance.oracle import matmul_bits
from tgrad.conformance.reference import REF, Ref
from tgrad.conformance.rosters import roster

EMU_DIR = Path(__file__).resolve().parents[2] / "tests" / "msl_emu"

CI = graph_roster("ci")
FAMILIES = ("elementwise", "broadcast", "fused", "mlp")


def _pick(family: str, count: int) -> list[GraphCase]:
    return [c for c in CI if c.family == family][:count]


# ---- the roster and the reference (no libtgrad) ---------------------------------------------------


@pytest.mark.parametrize("name", ["ci", "full"])
def test_graph_roster_ids_are_unique_and_every_family_and_op_is_there(name: str) -> None:
    cases = graph_roster(name)
    assert len({c.id for c in cases}) == len(cases)
    assert {c.family for c in cases} == set(FAMILIES)
    ops = {c.program[3:] for c in cases if c.family == "elementwise"}
    assert ops == set(ARITY)
    assert not {c.id for c in cases} & {c.id for c in roster(name)}, "ids shared with matmul cases"


def test_every_ci_graph_case_builds_its_operands_through_views() -> None:
    for case in CI:
        bases, apply_view = build_graph_operands(case)
        for i, (shape, view, _) in enumerate(case.operands):
            operand = apply_view(bases[i], i)
            assert operand.shape == shape, case.id
            if view not in ("plain", "reshape_split") and operand.size:
                assert np.shares_memory(operand, bases[i]), case.id


def test_broadcast_family_has_zero_d_size_one_and_strided_operands() -> None:
    operands = [o for c in CI if c.family == "broadcast" for o in c.operands]
    assert any(shape == () for shape, _, _ in operands)
    assert any(1 in shape for shape, _, _ in operands)
    assert {"transpose", "slice2", "expand", "negstep", "permute"} <= {v for _, v, _ in operands}


def test_ref_ops_are_the_oracles_op_by_op() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(0, 0x7F00, (6, 5), dtype=np.uint16)
    b = rng.integers(0, 0x7F00, (5, 4), dtype=np.uint16)
    bias = rng.integers(0, 0x7F00, (4,), dtype=np.uint16)
    got = REF.gelu(Ref(a) @ Ref(b) + Ref(bias), approximate="tanh").bits
    want = unary_bits("gelu_tanh", binary_bits("add", matmul_bits(a, b), bias))  # rounded op by op
    assert np.array_equal(got, want)
    assert np.array_equal((1 - Ref(a)).bits, binary_bits("sub", scalar_bits(1.0), a))
    assert np.array_equal(Ref(a).T.maximum(0.5).bits, binary_bits("maximum", a.T, scalar_bits(0.5)))
    assert np.array_equal(abs(-Ref(a)).bits, unary_bits("abs", unary_bits("neg", a)))
    assert Ref(bias).expand(3, 4).shape == (3, 4) and Ref(a).permute(1, 0).shape == (5, 6)
    with pytest.raises(TypeError):
        Ref(a) + "1"  # noqa: B018


def test_programs_run_the_same_text_on_tgrad_and_on_the_reference() -> None:
    case = next(c for c in CI if c.program == "mlp_relu")
    bases, apply_view = build_graph_operands(case)
    operands = [apply_view(tgrad.Tensor.from_numpy(b), i) for i, b in enumerate(bases)]
    out = PROGRAMS[case.program](tgrad, *operands)
    assert np.array_equal(out.numpy().view(np.uint16), reference_bits(case))


# ---- the runner on graph cases --------------------------------------------------------------------

FEW = _pick("elementwise", 2) + _pick("broadcast", 2) + _pick("fused", 3) + _pick("mlp", 1)


def test_graph_cases_pass_on_the_cpu_fused_and_unfused() -> None:
    was = tgrad.fusion_enabled()
    card = runner.run("cpu", cases=FEW)
    assert [c["outcome"] for c in card["cases"]] == ["pass"] * len(FEW), card["cases"]
    assert card["claim_made"] and tgrad.fusion_enabled() == was


def test_a_wrong_result_fails_naming_each_variant_and_both_fusion_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    real = runner.reference_bits

    def flipped(case: GraphCase) -> np.ndarray:
        out = real(case)
        out.flat[0] ^= 1
        return out

    monkeypatch.setattr(runner, "reference_bits", flipped)
    detail = runner.run("cpu", cases=_pick("fused", 1))["cases"][0]["detail"]
    for isa in (n for n, ok in tgrad.cpu_isas().items() if ok):
        assert f"{isa}, fusion on: " in detail and f"{isa}, fusion off: " in detail


def test_fused_bytes_that_differ_from_unfused_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    real = runner._run_program

    def spoil_fused(*args: Any) -> tuple[np.ndarray, list[str]]:
        bits, fused = real(*args)
        if tgrad.fusion_enabled():
            bits = bits.copy()
            bits.flat[-1] ^= 0x8000
        return bits, fused

    monkeypatch.setattr(runner, "_run_program", spoil_fused)
    card = runner.run("cpu", cases=_pick("fused", 1))
    detail = card["cases"][0]["detail"]
    assert card["cases"][0]["outcome"] == "fail" and "fused and unfused bytes differ" in detail
    assert "fusion off: " not in detail  # the unfused run still equals the oracle


def test_a_case_that_should_fuse_but_does_not_fails() -> None:
    # one unary op on an input: nothing to fuse, so a case claiming otherwise is vacuous
    lonely = GraphCase("fused-lonely", "fused", "op.exp", (((4, 4), "plain", "normal"),), fuses=True)
    card = runner.run("cpu", cases=[lonely])
    assert card["cases"][0]["outcome"] == "fail"
    assert "explain shows no fused op" in card["cases"][0]["detail"]


@pytest.mark.slow  # compiles kernels (the emulator's C++, PoCL's OpenCL C)
def test_the_gpu_backends_run_graph_cases_through_rendered_kernels() -> None:
    # an MLP block: on the emulator each step's MSL (a matmul with its fused bias and activation)
    # runs; on PoCL the same program runs on device="opencl"; fused and unfused, both routes
    case = _pick("mlp", 1)
    card = runner.run("msl-emu", cases=case, emu_dir=EMU_DIR)
    assert card["cases"][0]["outcome"] == "pass", card["cases"][0]["detail"]
    if next(b for b in tgrad.backends() if b.name == "opencl").available:
        card = runner.run("opencl", cases=case)
        assert card["cases"][0]["outcome"] == "pass", card["cases"][0]["detail"]


@pytest.mark.parametrize("threads", [1, 3])
def test_graph_cases_hold_at_one_and_at_an_odd_thread_count(threads: int) -> None:
    # the roster runs at the default count; the threaded MLP block (its matmuls above the
    # single-thread threshold) and the widest elementwise pass, split another way
    cases = [c for c in CI if c.family == "mlp" and c.operands[0][0] == (64, 256)] + [
        c for c in CI if c.family == "elementwise" and "allbits" in c.id][:2]
    assert len(cases) == 6
    saved = tgrad.num_threads()
    tgrad.set_num_threads(threads)
    try:
        card = runner.run("cpu", cases=cases)
    finally:
        tgrad.set_num_threads(saved)
    assert [c["outcome"] for c in card["cases"]] == ["pass"] * len(cases), card["cases"]
