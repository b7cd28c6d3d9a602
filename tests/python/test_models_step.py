"""Decode steps through captured programs (tgrad.models.step): the bytes of steps built op by op,
and of a full recompute, across the 32-position boundaries where a step is captured again."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tgrad
import tgrad.models
from model_dirs import config, storage_address, weights, write
from tgrad.models.step import ALIGN, DecodeSteps

PROMPT = np.array([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3]])
generate_module = importlib.import_module("tgrad.models.generate")  # the module (the package exports the function)
NEW = 42  # positions 28 .. 69: captured at 28 (seen 32), 32, 64; run between


def _model(tmp_path: Path, kind: str, **overrides: Any) -> tgrad.models.CausalLM:
    doc = config(kind, **overrides)
    return tgrad.models.from_pretrained(write(tmp_path, doc, weights(doc)))


def _generate(m: tgrad.models.CausalLM, programs: bool, ids: np.ndarray = PROMPT) -> tuple[np.ndarray, np.ndarray]:
    before = generate_module.STEP_PROGRAMS
    generate_module.STEP_PROGRAMS = programs
    try:
        tokens, logits = m.generate(ids, NEW, return_logits=True)
    finally:
        generate_module.STEP_PROGRAMS = before
    return tokens, logits


@pytest.mark.parametrize("kind, overrides", [("llama", {}), ("qwen2", {}), ("mistral", {"sliding_window": 5}),
                                             ("mistral", {"sliding_window": 40})],
                         ids=["llama", "qwen2", "window-5", "window-40"])
def test_program_steps_give_the_bytes_of_steps_built_op_by_op(tmp_path: Path, kind: str, overrides: Any) -> None:
    m = _model(tmp_path, kind, **overrides)
    built, run = _generate(m, False), _generate(m, True)
    assert np.array_equal(built[0], run[0])
    assert built[1].tobytes() == run[1].tobytes()
    # ... and of a forward over the whole sequence (no cache), at each new token's position
    ids = np.concatenate([PROMPT, run[0][:, :-1]], axis=1)
    full = m(ids, logits_dtype=tgrad.float32).numpy()[:, PROMPT.shape[1] - 1:]
    assert full.tobytes() == run[1].tobytes()


def test_a_batch_of_rows_of_one_length_runs_as_programs_with_the_same_bytes(tmp_path: Path) -> None:
    m = _model(tmp_path, "qwen2")
    ids = np.concatenate([PROMPT, (PROMPT * 5 + 1) % 96], axis=0)
    built, run = _generate(m, False, ids), _generate(m, True, ids)
    assert np.array_equal(built[0], run[0]) and built[1].tobytes() == run[1].tobytes()
    for row in range(2):  # each row's bytes alone
        alone = _generate(m, True, ids[row:row + 1])
        assert alone[1].tobytes() == run[1][row:row + 1].tobytes()


@pytest.mark.parametrize("threads", [1, 3])
def test_program_steps_do_not_depend_on_threads_or_fusion(tmp_path: Path, threads: int) -> None:
    m = _model(tmp_path, "llama")
    want = _generate(m, True)[1].tobytes()
    before, was_fused = tgrad.num_threads(), tgrad.ops.fusion_enabled()
    try:
        tgrad.set_num_threads(threads)
        for fused in (True, False):
            tgrad.set_fusion(fused)
            assert _generate(m, True)[1].tobytes() == want, (threads, fused)
    finally:
        tgrad.set_num_threads(before)
        tgrad.set_fusion(was_fused)


def test_a_step_is_captured_once_per_32_positions_and_run_between(tmp_path: Path) -> None:
    m = _model(tmp_path, "llama")
    cache = m.new_cache(PROMPT.shape[1] + NEW)
    m(PROMPT, cache=cache, logits_to_keep=1)
    steps = DecodeSteps(m, cache)
    for i in range(NEW):
        steps(np.array([[i % 90]])).realize()
    seen = {min(-(-(n + 1) // ALIGN) * ALIGN, cache.capacity) for n in range(PROMPT.shape[1], PROMPT.shape[1] + NEW)}
    assert steps.captures == len(seen) == 3 and steps.runs == NEW - 3
    assert cache.length == PROMPT.shape[1] + NEW


def test_program_steps_write_the_cache_in_place(tmp_path: Path) -> None:
    m = _model(tmp_path, "llama")
    cache = m.new_cache(40)
    m(PROMPT[:, :4], cache=cache).realize()
    where = [storage_address(k) for k in cache.keys + cache.values]
    steps = DecodeSteps(m, cache)
    for i in range(10):
        steps(np.array([[i]])).realize()
        assert [storage_address(k) for k in cache.keys + cache.values] == where
    assert steps.runs == 9


def test_steps_past_the_capacity_or_with_gradients_are_built_as_usual(tmp_path: Path) -> None:
    m = _model(tmp_path, "llama")
    want = _generate(m, False)
    cache = m.new_cache(PROMPT.shape[1] + 3)  # full after 3 steps: the 4th is built and grows it
    m(PROMPT, cache=cache, logits_to_keep=1)
    steps = DecodeSteps(m, cache)
    got = [steps(np.array([[int(t)]])).numpy() for t in want[0][0, :8]]
    # captured at 28 (seen: the capacity, 31), run at 29 and 30, built at 31 (grown to 62),
    # captured again at 32 (seen 62), run at 33 .. 35
    assert (steps.captures, steps.runs, cache.capacity) == (2, 5, 62)
    assert np.concatenate(got, axis=1).tobytes() == want[1][:, 1:9].tobytes()
    m.lm_head.weight.requires_grad_()
    try:
        assert _generate(m, True)[1].tobytes() == want[1].tobytes()  # refused to capture: built each step
    finally:
        m.lm_head.weight.requires_grad_(False)
